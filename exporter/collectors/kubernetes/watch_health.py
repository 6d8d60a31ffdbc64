"""One watch's health as one explicit state, moved by documented transitions; safe to read from any thread."""

from __future__ import annotations

import threading
import time
from enum import Enum
from typing import Callable, NamedTuple, Optional

# After a failed watch, a new one that stays open this long counts as working (one the server refuses,
# a 403, fails within it), unless the failed one fell silent or was dropped: then only an event counts.
WATCH_CONFIRM_SECONDS = 1.0
_PROOF_CHECK_SECONDS = 0.05  # the shortest pause of the proof thread between two looks at the clock


class Stage(Enum):
    STARTING = "starting"  # nothing listed yet
    FAILED = "failed"  # the last list or watch request failed; the resource is listed again (after a pause)
    UP = "up"  # listed and watching: the cache follows the API server
    PROVING = "proving"  # listed again after a failed watch; up once the new watch proves itself


class State(NamedTuple):
    """An immutable value, swapped whole under the lock: a reader never sees half a transition."""

    stage: Stage
    failed_verb: str = ""  # FAILED: "list" or "watch", the request that failed
    opened_at: Optional[float] = None  # PROVING: when the first watch request since the list was sent
    # The last failure was a watch we dropped (silent, or a line past the cap): only an event proves the
    # next one. Cleared by the next line that arrives, whatever the stage.
    needs_event: bool = False


class WatchHealth:
    """Whether a watch's cache can be trusted (`healthy`), as one State. The transitions:

        STARTING or FAILED("list") --listed--------------------------> UP
        FAILED("watch") -------------listed--------------------------> PROVING
        UP or PROVING ---------------listed--------------------------> the same (a relist after the watch's version
                                                                        expired: the cache stayed good meanwhile)
        any -------------------------failed(verb)--------------------> FAILED(verb)
        PROVING ---------------------line_arrived--------------------> UP
        PROVING ---------------------open WATCH_CONFIRM_SECONDS------> UP, made by whoever reads `healthy`
                                     (not while needs_event)      first: a thread started when the watch opened, on the clock given

    The watch thread makes every transition but the last. Each move into UP calls `on_up` (which reports
    the API answering again: the reporter logs that only after a failure) under the lock, so that it
    cannot come after the report of a failure that followed it.
    """

    def __init__(self, on_up: Callable[[], None], clock: Callable[[], float] = time.monotonic):
        self._on_up = on_up
        self._clock = clock
        self._lock = threading.Lock()
        self._state = State(Stage.STARTING)

    @property
    def state(self) -> State:
        with self._lock:
            return self._state

    @property
    def healthy(self) -> bool:
        """Listed and watching: UP, or PROVING with a watch open WATCH_CONFIRM_SECONDS (which moves it to UP)."""
        with self._lock:
            state = self._state
            proven = (state.stage is Stage.PROVING and not state.needs_event and state.opened_at is not None
                      and self._clock() - state.opened_at >= WATCH_CONFIRM_SECONDS)
            if proven:
                self._state = State(Stage.UP)
                self._on_up()
        return proven or state.stage is Stage.UP

    def listed(self) -> None:
        """A list was handed to the cache."""
        with self._lock:
            state = self._state
            after_failed_watch = state.stage is Stage.PROVING or (
                state.stage is Stage.FAILED and state.failed_verb == "watch")
            stage = Stage.PROVING if after_failed_watch else Stage.UP
            self._state = State(stage, needs_event=state.needs_event)
            if stage is Stage.UP:
                self._on_up()

    def watch_opened(self) -> None:
        """A watch request was sent; the first since the list starts the PROVING clock."""
        with self._lock:
            state = self._state
            starts = state.stage is Stage.PROVING and state.opened_at is None
            if starts:
                state = self._state = state._replace(opened_at=self._clock())
        if starts and not state.needs_event:
            # Nothing else may read `healthy` soon (a ResourceSlice watch is read by /metrics only), and
            # the API's recovery is logged when the watch has proved itself, not at some later read.
            threading.Thread(target=self._prove, args=(state.opened_at,), name="watch-proof",
                             daemon=True).start()

    def _prove(self, opened_at: float) -> None:
        """Reads `healthy` once the watch opened at `opened_at` has been open WATCH_CONFIRM_SECONDS by the
        clock (not the wall's: a test's clock moves by hand), unless this proof ended meanwhile."""
        while True:
            with self._lock:
                state = self._state
                remaining = opened_at + WATCH_CONFIRM_SECONDS - self._clock()
            if state.stage is not Stage.PROVING or state.opened_at != opened_at or state.needs_event:
                return  # proven by a line, failed, or listed again: no longer this proof's to make
            if remaining <= 0:
                self.healthy  # noqa: B018 - the read makes the move into UP
                return
            time.sleep(max(remaining, _PROOF_CHECK_SECONDS))

    def line_arrived(self) -> None:
        """A watch delivered an event or a bookmark: the watch works."""
        with self._lock:
            state = self._state
            proving = state.stage is Stage.PROVING
            self._state = State(Stage.UP) if proving else state._replace(needs_event=False)
            if proving:
                self._on_up()

    def failed(self, verb: str, dropped: bool = False) -> None:
        """A `verb` ("list" or "watch") request failed; `dropped`: a watch we closed (silent, too large)."""
        with self._lock:
            self._state = State(Stage.FAILED, verb, needs_event=self._state.needs_event or dropped)
