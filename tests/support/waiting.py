"""Polling with a deadline instead of sleeping a fixed time: the tests' one way to wait."""

from __future__ import annotations

import time
from typing import Callable, Iterator


def _polls(seconds: float, interval: float) -> Iterator[bool]:
    """Yields before each look: True while time is left, then False once (the last look)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        yield True
        time.sleep(interval)
    yield False


def wait_until(condition: Callable[[], object], timeout_seconds: float = 15.0, interval: float = 0.05,
               describe: str = ""):
    """Poll until condition() is truthy and return that value; fail naming what was waited for
    (`describe`, else the condition's source) and its last answer."""
    value = None
    for _ in _polls(timeout_seconds, interval):
        value = condition()
        if value:
            return value
    raise AssertionError(f"waited {timeout_seconds:g} s for {_what(condition, describe)}; last answer: {value!r}")


def holds_throughout(condition: Callable[[], object], seconds: float, interval: float = 0.05,
                     describe: str = "") -> None:
    """Poll condition() for `seconds` and fail at its first falsy answer: for what must not happen
    within a period, so that a breach fails at once rather than when the period ends."""
    for _ in _polls(seconds, interval):
        value = condition()
        if not value:
            raise AssertionError(f"{_what(condition, describe)} stopped holding; answer: {value!r}")


def _what(condition: Callable[[], object], describe: str) -> str:
    return describe or getattr(condition, "__qualname__", repr(condition))
