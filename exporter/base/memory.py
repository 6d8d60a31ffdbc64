"""glibc's malloc set up for a process whose every scrape allocates a few buffers the size of its answer."""

from __future__ import annotations

import ctypes
import os
from typing import Mapping

_M_ARENA_MAX = -8  # mallopt's parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_M_TRIM_THRESHOLD = -1
# Above this a buffer is mapped for itself and unmapped when freed. Below it, buffers are reused
# from the heap: on a 6,400-series node every per-scrape buffer (1.5-1.8 MB) stays there, where
# reusing the same memory keeps the rewrite fast; mapping them too (glibc's initial 128 KiB)
# cost 10 ms of CPU per scrape instead of 6 in benchmarks/perf.py's conditions, in page faults.
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
# Free memory at the heap's top is kept up to this much (at least) while answers are smaller than the
# mmap threshold: a fixed mmap threshold leaves glibc's trim threshold at 128 KiB, so the heap's top went
# back to the system after every scrape and was faulted in again on the next (~400 page faults, a
# fifth of a scrape's CPU at 6,400 series). Larger answers' buffers are mapped on their own whatever
# the heap keeps, and there keeping it only added 4-6 MiB to the peak of a 25,600-series node.
TRIM_THRESHOLD_BYTES = MMAP_THRESHOLD_BYTES
# What a scrape frees at the heap's top is about its upstream body and its answer together (the fetch's
# buffer, the refilled text, its gzip): the threshold is kept half again above their sum, rounded up to a
# MiB. Measured in the server (minor page faults per scrape, benchmarks/perf.py's bodies): an NVIDIA node
# of 6,400 series (1.5 + 1.8 MB) faulted 33-186 times per gzip scrape at 4 MiB, 0-4 at 5 or 6 MiB; an
# AMD node of as many series sends twice the bytes per series (2.9 + 2.5 MB), and at 4 MiB it faulted
# 450-780 times per scrape, at 6 MiB and more 0-13.
_TRIM_MARGIN = 1.5
_MIB = 1024 * 1024
DEFAULT_TRIM_THRESHOLD_BYTES = 128 * 1024  # glibc's own
# Set by tune_malloc where the trim threshold is ours to set. glibc's own until an answer below the
# mmap threshold has been rewritten: a large node's first rewrite, its peak, then keeps nothing.
_trim = {"mallopt": None, "bytes": DEFAULT_TRIM_THRESHOLD_BYTES}


def tune_malloc(environ: Mapping[str, str] = os.environ) -> bool:
    """One malloc arena, a fixed mmap threshold and a trim threshold to match; False where the C
    library has no mallopt (e.g. musl). glibc's own variables (MALLOC_ARENA_MAX,
    MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_) win where they are set.

    - glibc gives each thread that allocates its own arena, up to 8 per core: each HTTP connection's
      thread kept a scrape's worth of freed memory of its own. The GIL lets one thread allocate at a
      time anyway, so one arena costs no waiting.
    - glibc maps blocks above its threshold on their own, but the first time such a block is freed
      it raises the threshold to that block's size (up to 32 MiB): from then on they come from the
      heap, where what lies between them keeps freed memory from going back, and the peak RSS of a
      25,600-series node (6-7 MB buffers) grew by 20-30 MiB over its first hundred scrapes. A fixed
      threshold turns that adjustment off; the price is page faults on those buffers' fresh memory.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    done = True
    if "MALLOC_ARENA_MAX" not in environ:
        done = bool(mallopt(_M_ARENA_MAX, 1)) and done
    if "MALLOC_MMAP_THRESHOLD_" not in environ:
        done = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and done
    if "MALLOC_TRIM_THRESHOLD_" not in environ:
        _trim["mallopt"] = mallopt
    return done


def trim_threshold_for(answer_bytes: int, body_bytes: int = 0) -> int:
    """How much freed memory the heap's top keeps for answers of this size rewritten from upstream bodies of
    this size (TRIM_THRESHOLD_BYTES, or more for larger buffers below the mmap threshold)."""
    if max(answer_bytes, body_bytes) >= MMAP_THRESHOLD_BYTES:
        return DEFAULT_TRIM_THRESHOLD_BYTES
    scrape_mib = -(-int((answer_bytes + body_bytes) * _TRIM_MARGIN) // _MIB)  # rounded up
    return max(TRIM_THRESHOLD_BYTES, scrape_mib * _MIB)


def fit_heap_to_answer(answer_bytes: int, body_bytes: int = 0) -> None:
    """Sets the trim threshold for answers of this size rewritten from bodies of this size; nothing unless
    tune_malloc set glibc up."""
    mallopt, wanted = _trim["mallopt"], trim_threshold_for(answer_bytes, body_bytes)
    if mallopt is not None and _trim["bytes"] != wanted:
        mallopt(_M_TRIM_THRESHOLD, wanted)
        _trim["bytes"] = wanted
