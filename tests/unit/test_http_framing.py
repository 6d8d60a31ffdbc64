"""Tests of exporter.sources.upstream.http_framing: a response body read in blocks, chunked framing undone.

The reads come from a list of wire pieces, cut anywhere (mid size line, mid CRLF, mid data), so that every
way a socket may split a chunked body is met; tests/unit/test_upstream.py reads the same way from real servers.
"""

from __future__ import annotations

import random
from typing import List, Optional, Sequence

import pytest

from exporter.sources.upstream.http_framing import BLOCK_BYTES, FramingError, read_body


class Wire:
    """A socket's read side: each read1 returns at most the next of `cuts` bytes of `data` (all of what is
    left once the cuts run out), then 0 at the end; `reads_after_end` counts reads once all was taken."""

    def __init__(self, data: bytes, cuts: Sequence[int] = ()) -> None:
        self._data, self._cuts, self._at = data, list(cuts), 0
        self.reads_after_end = 0

    def readinto1(self, view: memoryview) -> int:
        if self._at >= len(self._data):
            self.reads_after_end += 1
            return 0
        size = min(len(view), self._cuts.pop(0) if self._cuts else len(self._data), len(self._data) - self._at)
        view[:size] = self._data[self._at : self._at + size]
        self._at += size
        return size


def framed(body: bytes, sizes: Sequence[int], size_line=lambda size: b"%x" % size) -> bytes:
    pieces, start = [], 0
    for size in list(sizes) + [len(body)]:
        if start >= len(body):
            break
        piece = body[start : start + size]
        pieces += [size_line(len(piece)), b"\r\n", piece, b"\r\n"]
        start += len(piece)
    return b"".join(pieces) + b"0\r\n\r\n"


def read(wire: Wire, chunked: bool = True, length: Optional[int] = None):
    got: List[bytes] = []
    whole = read_body(wire.readinto1, lambda parts: got.extend(bytes(part) for part in parts), chunked, length)
    return whole, b"".join(got)


def test_every_way_of_cutting_chunks_and_reads_gives_the_body_back():
    rng = random.Random(7)
    for _ in range(1500):
        body = rng.randbytes(rng.randrange(1, 3000))
        sizes = [rng.randrange(1, 600) for _ in range(40)]
        line = rng.choice([lambda size: b"%x" % size, lambda size: b"%X" % size, lambda size: b"%04x;name=v" % size,
                           lambda size: b"%x \t" % size])
        cuts = [rng.randrange(1, 80) for _ in range(400)]
        assert read(Wire(framed(body, sizes, line), cuts)) == (True, body)


def test_one_byte_reads():
    body = b"gpu_temp{gpu=\"0\"} 41\r\n" * 20  # data that itself holds CRLFs and hex-looking text
    assert read(Wire(framed(body, [7, 100, 3]), [1] * 10_000)) == (True, body)


def test_one_chunk_larger_than_a_block_spans_blocks():
    body = random.Random(1).randbytes(3 * BLOCK_BYTES + 17)
    assert read(Wire(framed(body, [len(body)]))) == (True, body)


def test_nothing_is_read_after_the_last_chunk():
    """Trailers, if any, and whatever a server sends after its answer are not the body's, and never read."""
    wire = Wire(framed(b"abc", [3]) + b"X-Trailer: 1\r\n\r\nHTTP/1.1 200 OK\r\n", [9, 5])
    assert read(wire) == (True, b"abc")
    assert wire.reads_after_end == 0


def test_the_first_read_asks_for_what_is_buffered_alone():
    """A reader that already holds bytes (taken in with the headers) would read the socket too if asked for more,
    and wait there for bytes that may never come: the first read asks for `buffered` bytes, later ones for blocks."""
    asked: List[int] = []
    wire = Wire(framed(b"x" * 5000, [4096]))

    def readinto1(view: memoryview) -> int:
        asked.append(len(view))
        return wire.readinto1(view)

    got: List[bytes] = []
    assert read_body(readinto1, lambda parts: got.extend(bytes(part) for part in parts), True, None, buffered=10)
    assert b"".join(got) == b"x" * 5000
    assert asked[:2] == [10, BLOCK_BYTES]  # "1000\r\n" and 4 bytes of data, then a whole block
    asked.clear()
    wire = Wire(b"hello, and what follows the answer")
    assert read_body(readinto1, lambda parts: None, False, 5, buffered=2)
    assert asked == [2, 3]  # a sized body: the buffered bytes, then what is left of its length


def test_an_empty_chunked_body():
    assert read(Wire(b"0\r\n\r\n")) == (True, b"")


@pytest.mark.parametrize("cut_at", [0, 1, 3, 5, 8, 9])
def test_a_connection_ended_before_the_last_chunk_is_a_body_cut_short(cut_at):
    wire = framed(b"abcdef", [3])  # 3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n
    assert read(Wire(wire[:cut_at]))[0] is False


@pytest.mark.parametrize("wire, cuts", [
    (b"zz\r\nab\r\n0\r\n\r\n", ()),  # not hex
    (b"-2\r\nab\r\n0\r\n\r\n", ()),
    (b"0x2\r\nab\r\n0\r\n\r\n", ()),  # a prefix int() would take
    (b"2\r\nabc\r\n0\r\n\r\n", ()),  # more data than the size line said
    (b"2\r\nab\r\n0\r\n\r\n".replace(b"ab\r\n", b"abXY"), [5]),  # found only on the next read
    (b"2\r\nab\r\n1_0\r\n" + b"x" * 16 + b"\r\n0\r\n\r\n", [1] * 40),
])
def test_broken_framing_is_an_error(wire, cuts):
    with pytest.raises(FramingError):
        read(Wire(wire, cuts))


def test_a_size_line_that_never_ends_is_an_error_not_a_growing_buffer():
    with pytest.raises(FramingError, match="longer than"):
        read(Wire(b"1" * 10_000, [1000] * 10))


def test_a_sized_body_is_read_to_its_length_and_no_further():
    wire = Wire(b"hello" + b"after the answer", [2])
    assert read(wire, chunked=False, length=5) == (True, b"hello")
    assert read(Wire(b"hel"), chunked=False, length=5) == (False, b"hel")  # cut short
    assert read(Wire(b""), chunked=False, length=0) == (True, b"")


def test_an_unsized_body_ends_with_the_connection():
    body = random.Random(3).randbytes(BLOCK_BYTES + 5)
    assert read(Wire(body, [1000, 70_000]), chunked=False, length=None) == (True, body)


def test_a_feed_that_raises_stops_the_reading():
    wire = Wire(framed(b"a" * 100, [10]), [20] * 100)

    class Enough(Exception):
        pass

    def feed(parts):
        raise Enough

    with pytest.raises(Enough):
        read_body(wire.readinto1, feed, True, None)
    assert wire.reads_after_end == 0
