"""A bounded cache of lookups whose failures are remembered and retried after a while."""

from __future__ import annotations

import threading
import time
from typing import Callable, Dict, Generic, Hashable, Iterable, NamedTuple, Optional, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Entry(NamedTuple):
    answer: object  # None: the last lookup failed
    failed_at: float  # when it failed (unused for an answer)


class RetryingCache(Generic[K, V]):
    """Keeps each key's answer for good, and a failed lookup (`lookup` returned None) for
    `retry_after_seconds`, after which the next `get` asks again.

    Answers and failures together are at most `max_entries`: the keys of failing lookups can be as
    many as the answered ones (a Job a minute from a CronJob the API will not describe), so both
    count. When full, the oldest entry goes first; an evicted key is only looked up again.
    A lookup that raises stores nothing (the exception reaches the caller of `get`): the key is
    looked up again at its next `get`, as for one never asked.
    `lookup` runs without the cache's lock held, so it may call `failed_before`; callers that must
    not look one key up twice at once hold their own lock around `get`.
    """

    def __init__(self, lookup: Callable[[K], Optional[V]], retry_after_seconds: float, max_entries: int = 4096,
                 clock: Callable[[], float] = time.monotonic):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self._lookup = lookup
        self._retry_after = retry_after_seconds
        self._max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: Dict[K, _Entry] = {}  # insertion order is age: the first is the oldest
        self.lookups = 0  # calls of `lookup` (cache misses and retries), for tests and debugging

    def get(self, key: K) -> Optional[V]:
        """The cached answer; else the lookup's, unless it failed less than the retry interval ago (None)."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None:
            if entry.answer is not None:
                return entry.answer  # type: ignore[return-value]
            if self._clock() - entry.failed_at < self._retry_after:
                return None
        with self._lock:
            self.lookups += 1
        answer = self._lookup(key)
        self._store(key, _Entry(answer, self._clock() if answer is None else 0.0))
        return answer

    def would_look_up(self, key: K) -> bool:
        """Whether `get(key)` would call the lookup now (not remembered, or failed long enough ago)."""
        with self._lock:
            entry = self._entries.get(key)
        return entry is None or (entry.answer is None and self._clock() - entry.failed_at >= self._retry_after)

    def failed_before(self, key: K) -> bool:
        """Whether the last lookup of `key` failed (and the cache still remembers it)."""
        with self._lock:
            entry = self._entries.get(key)
        return entry is not None and entry.answer is None

    def retain(self, keys: Iterable[K]) -> None:
        """Forget every key not in `keys`: answers that may change once their key is reused."""
        keep = set(keys)
        with self._lock:
            self._entries = {key: entry for key, entry in self._entries.items() if key in keep}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _store(self, key: K, entry: _Entry) -> None:
        with self._lock:
            self._entries.pop(key, None)  # re-inserted last: a fresh entry is the youngest
            while len(self._entries) >= self._max_entries:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = entry
