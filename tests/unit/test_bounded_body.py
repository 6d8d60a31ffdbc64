"""exporter.base.bounded_body: an answer's body within its size and time bounds."""

import pytest

from exporter.base.bounded_body import BodyTooLarge, BodyTooSlow, read_bounded, read_head


def test_chunks_within_both_bounds_are_joined():
    assert read_bounded([b"ab", b"", b"cd"], 4, deadline=10.0, clock=lambda: 0.0) == b"abcd"


def test_one_byte_past_the_size_bound_is_refused():
    with pytest.raises(BodyTooLarge):
        read_bounded([b"ab", b"cde"], 4, deadline=10.0, clock=lambda: 0.0)


def test_a_body_still_coming_at_its_deadline_is_refused_without_waiting_for_the_rest():
    times = iter([1.0, 11.0])
    consumed = []

    def chunks():
        for chunk in (b"a", b"b", b"c"):
            consumed.append(chunk)
            yield chunk

    with pytest.raises(BodyTooSlow):
        read_bounded(chunks(), 100, deadline=10.0, clock=lambda: next(times))
    assert consumed == [b"a", b"b"]


def test_the_head_stops_reading_once_past_its_bound():
    consumed = []

    def chunks():
        for chunk in (b"abc", b"def", b"ghi"):
            consumed.append(chunk)
            yield chunk

    assert read_head(chunks(), 4) == b"abcdef" and consumed == [b"abc", b"def"]
    assert read_head([b"ab"], 4) == b"ab"
