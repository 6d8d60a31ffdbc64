"""A vendor exporter's response body collected under a size cap, gzip decoded on the fly in bounded steps."""

from __future__ import annotations

import io
import zlib
from typing import Callable, Sequence

from exporter.base.errors import UpstreamError
from exporter.sources.upstream import FetchWords


class CappedBody:
    """Collects a response body, decoding gzip on the fly and never growing past max_bytes decoded.

    Decoding here rather than in urllib3 lets us cap each inflate step (`max_length`), so a small
    gzip bomb cannot allocate more than the cap before we notice.
    """

    def __init__(self, max_bytes: int, gzipped: bool, error: Callable[[str, str], UpstreamError],
                 expected_bytes: int, words: FetchWords) -> None:
        self._max_bytes = max_bytes
        self._error = error
        self._words = words
        # BytesIO rather than a list of parts joined at the end: the parts and their join were two
        # copies of a body of megabytes at once; BytesIO hands its buffer over trimmed, not copied.
        self._buffer = _presized(min(expected_bytes, max_bytes))
        self._size = 0
        self._inflater = _gunzipper() if gzipped else None
        self._member_open = False  # a gzip member has begun but not yet ended
        self.wire_bytes = 0

    def feed(self, parts: Sequence[memoryview]) -> None:
        """Adds these parts of the body, as they came (gzip-encoded or not), in order."""
        if self._inflater is None:  # most bodies: a block's parts checked and copied in together
            size = sum(map(len, parts))
            self.wire_bytes += size
            self._count(size)
            self._buffer.writelines(parts)
            return
        for data in parts:
            self.wire_bytes += len(data)
            try:
                self._inflate(data)
            except zlib.error as exc:
                raise self._error(f"sent a gzip body that does not decode ({exc})", "error") from exc

    def _inflate(self, data: bytes) -> None:
        while data:
            self._member_open = True
            self._keep(self._inflater.decompress(data, self._max_bytes - self._size + 1))
            if self._inflater.eof:
                # Concatenated gzip members are one valid gzip stream (RFC 1952 section 2.2).
                data = self._inflater.unused_data
                self._inflater = _gunzipper()
                self._member_open = False
            else:
                data = self._inflater.unconsumed_tail

    def _keep(self, data: bytes) -> None:
        self._count(len(data))
        if data:
            self._buffer.write(data)

    def _count(self, size: int) -> None:
        self._size += size
        if self._size > self._max_bytes:
            raise self._error(f"sent more than {self._max_bytes} bytes once decoded: is {self._words.url_flag} "
                              f"really {self._words.name}'s /metrics?", "too_large")

    def finish(self) -> bytes:
        if self._member_open:
            raise self._error(f"ended its response in the middle of a gzip stream after {self.wire_bytes} "
                              f"bytes: is {self._words.name} restarting?", "truncated")
        self._buffer.truncate(self._size)  # what the buffer was sized for beyond the body
        return self._buffer.getvalue()


def _presized(size: int) -> io.BytesIO:
    """An empty BytesIO whose buffer already holds `size` bytes. Grown from nothing, a body of
    megabytes took some twenty reallocations (BytesIO adds an eighth each time), each a copy where
    the memory after it was taken; sized once from the last answer's length, it takes none while
    the answers keep their size, and one past the mmap threshold is mapped at once (base/memory)."""
    buffer = io.BytesIO()
    if size > 0:
        buffer.seek(size - 1)
        buffer.write(b"\0")  # BytesIO allocates up to here; the body then overwrites it
        buffer.seek(0)
    return buffer


def _gunzipper():
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
