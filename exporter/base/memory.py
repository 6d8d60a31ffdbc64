"""glibc's malloc told to give large buffers back to the system when they are freed (a fixed mmap threshold)."""

from __future__ import annotations

import ctypes

# mallopt's parameter number (malloc.h) and glibc's default threshold.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024


def give_back_large_buffers(threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold; False where the C library has no mallopt (e.g. musl).

    Every scrape allocates a few buffers of megabytes (the upstream body, the answer, its gzip
    encoding). glibc serves blocks above its threshold with mmap and unmaps them on free, but the
    first time such a block is freed it raises the threshold to that block's size (up to 32 MiB):
    from then on those buffers come from the heap, where what lies between them keeps the freed
    memory from going back, and the peak RSS of a 25,600-series node grew by 15-20 MiB over its
    first hundred scrapes. Setting the threshold turns that adjustment off. The price is a page
    fault per 4 KiB of a fresh buffer, well under a millisecond per megabyte.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold_bytes))
