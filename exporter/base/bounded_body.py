"""An HTTP answer's body read within a size and a time bound, whoever sent it.

A client's timeout bounds each read, not the answer: a peer that trickles a byte at a time, or sends
without end, would hold the reader for good. Both the API reads on the mapping refresher and `top`'s
scrapes through the pod proxy take their bodies through here.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable


class BodyTooLarge(Exception):
    """The body passed its size bound."""


class BodyTooSlow(Exception):
    """The body was still coming at its deadline."""


def read_bounded(chunks: Iterable[bytes], max_bytes: int, deadline: float,
                 clock: Callable[[], float] = time.monotonic) -> bytes:
    """The chunks joined; BodyTooLarge past `max_bytes`, BodyTooSlow once `clock()` passes `deadline`."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > max_bytes:
            raise BodyTooLarge(max_bytes)
        if clock() > deadline:
            raise BodyTooSlow(deadline)
    return bytes(body)


def read_head(chunks: Iterable[bytes], max_bytes: int) -> bytes:
    """The body's start: chunks until `max_bytes` are passed (the chunk that passes them included), the rest
    left unread. For error answers, whose first bytes say what went wrong."""
    head = bytearray()
    for chunk in chunks:
        head += chunk
        if len(head) > max_bytes:
            break
    return bytes(head)
