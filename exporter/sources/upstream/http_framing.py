"""A response body's bytes as they come off the socket, read in large blocks, with HTTP/1.1 chunked framing undone.

http.client undoes chunked framing one chunk at a time in Python: a header line read, parsed and checked,
then the chunk's data read, for every chunk. A Go server's chunks are as large as each write its handler
makes: dcgm-exporter writes its whole answer at once (one chunk), but client_golang's promhttp, which AMD's
metrics exporter serves with, writes each metric family through a 4 KiB buffer, so a 2.9 MB answer comes in
some 700 chunks. Read through http.client, such an answer cost 13-15 ms of CPU to fetch, the same bytes in
one chunk 3 ms. Here the socket is read in blocks of up to 256 KiB, whatever the chunks' sizes, and each
chunk costs one regular-expression match on the block and one slice handed on: about 4 ms and 2 ms.
"""

from __future__ import annotations

import re
from typing import Callable, List, Optional

BLOCK_BYTES = 256 * 1024
# What comes between two chunks' data: the CRLF that ends the one (absent before the first), then the next
# one's size line: hex digits, optional chunk extensions (RFC 9112 section 7.1.1; ignored, as every client
# ignores those it does not know), CRLF. Sixteen hex digits say more than any body the cap lets through
# (Go writes no leading zeros); a bare LF for CRLF, which no Go server sends, is an error here.
_BETWEEN_CHUNKS = re.compile(rb"\r\n([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r\n")
_FIRST_CHUNK = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r\n")
# A size line this long without its CRLF is not one: some servers' extensions are long, none this long.
_MAX_SIZE_LINE_BYTES = 4096


class FramingError(Exception):
    """The body's chunked framing is broken: what was wrong, for the fetch's error message."""


Feed = Callable[[List[memoryview]], None]


def read_body(readinto1: Callable[[memoryview], int], feed: Feed, chunked: bool, length: Optional[int],
              buffered: int = 0) -> bool:
    """Reads a response body through `readinto1` (one read of the socket at most, 0 at its end) and hands its
    bytes to `feed`, a list of slices per block read, in order, chunked framing undone; for a body that is
    not chunked, up to `length` bytes or, where that is None, up to the end of the connection. False where the
    connection ended first (a body cut short); a `feed` that raises stops the reading. `feed` must copy what
    it keeps: each block's memory is reused for the next.

    `buffered`: how many bytes the reader already holds (an io.BufferedReader that read them with the headers).
    The first read asks for those alone: a BufferedReader asked for more reads the socket too, and would wait
    there, until the deadline, for bytes a server keeping the connection open never sends once its answer,
    whole in the buffer, is done."""
    block = bytearray(BLOCK_BYTES)
    view = memoryview(block)
    reads = _first_read_limited(readinto1, buffered)
    try:
        if not chunked:
            return _read_plain(reads, feed, view, length)
        return _Dechunker(feed).read(reads, block, view)
    finally:
        view.release()


def _first_read_limited(readinto1: Callable[[memoryview], int], buffered: int) -> Callable[[memoryview], int]:
    """`readinto1`, its first read asking for no more than `buffered` bytes (where that is not 0)."""
    limit = [buffered or None]

    def read(into: memoryview) -> int:
        first, limit[0] = limit[0], None
        return readinto1(into if first is None else into[:first])

    return read


def _read_plain(readinto1, feed, view: memoryview, length: Optional[int]) -> bool:
    left = length
    while left is None or left > 0:
        got = readinto1(view if left is None or left >= len(view) else view[:left])
        if not got:
            return left is None  # the connection's end ends an unsized body, and cuts a sized one short
        feed([view[:got]])
        if left is not None:
            left -= got
    return True


class _Dechunker:
    """Chunked framing undone a block at a time: a chunk's data is handed on as slices of the blocks it
    arrived in; what is left of a block that is not yet a whole size line is moved to the next block's start."""

    def __init__(self, feed: Feed) -> None:
        self._feed = feed
        self._data_left = 0  # of the chunk whose data is being read
        self._first = True  # no chunk yet: no CRLF before the first size line

    def read(self, readinto1, block: bytearray, view: memoryview) -> bool:
        kept = 0  # bytes at the block's start carried over from the last read: part of a size line
        while True:
            got = readinto1(view[kept:])
            if not got:
                return False  # the last chunk never came
            end = kept + got
            parts: List[memoryview] = []
            position = self._take(block, view, end, parts)
            self._feed(parts)
            if position is None:
                return True  # the last chunk came: trailers, if any, are not needed
            kept = end - position
            if kept > _MAX_SIZE_LINE_BYTES:
                raise FramingError(f"sent a chunk size line longer than {_MAX_SIZE_LINE_BYTES} bytes")
            block[:kept] = block[position:end]

    def _take(self, block: bytearray, view: memoryview, end: int, parts: List[memoryview]) -> Optional[int]:
        """Adds the chunk data in block[:end] to `parts`; where the unread rest starts, or None after the last chunk."""
        position, add = 0, parts.append
        left = self._data_left
        if left:  # the rest of a chunk begun in an earlier block
            if end <= left:
                add(view[:end])
                self._data_left = left - end
                return end
            add(view[:left])
            position = left
            self._data_left = 0
        match = (_FIRST_CHUNK if self._first else _BETWEEN_CHUNKS).match
        while True:  # one whole chunk a turn, kept short: a promhttp body has some 250 chunks per MB
            found = match(block, position, end)
            if found is None:
                return self._unmatched(block, position, end)
            size = int(found[1], 16)
            if not size:
                return None
            self._first = False
            match = _BETWEEN_CHUNKS.match
            start = found.end()
            stop = start + size
            if stop > end:  # the chunk goes on in the next block
                add(view[start:end])
                self._data_left = stop - end
                return end
            add(view[start:stop])
            position = stop

    def _unmatched(self, block: bytearray, position: int, end: int) -> int:
        """Where a size line that did not match starts, if it may still be cut short by the block's end;
        an error if it cannot be one."""
        line_at = position if self._first else position + 2  # after the CRLF that ends the last chunk's data
        if not self._first and block[position : min(line_at, end)] != b"\r\n"[: end - position]:
            raise FramingError("sent chunk data longer than its chunk's size line said")
        if block.find(b"\n", line_at, end) >= 0:
            raise FramingError("sent a malformed chunk size line")
        return position  # a size line not yet whole: wait for more
