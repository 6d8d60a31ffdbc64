"""Tests of exporter.base.memory: how much freed heap is kept for answers of each size."""

from __future__ import annotations

import subprocess
import sys

from exporter.base.memory import (DEFAULT_TRIM_THRESHOLD_BYTES, MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES,
                                  trim_threshold_for)


def test_answers_below_the_mmap_threshold_keep_the_heap_top():
    # A 6,400-series node's answer (1.5-1.8 MB) comes from the heap: its freed top is kept for the next scrape.
    assert trim_threshold_for(0) == trim_threshold_for(1_830_000) == TRIM_THRESHOLD_BYTES
    assert TRIM_THRESHOLD_BYTES >= 2 * 1_830_000


def test_the_heap_top_kept_grows_with_the_body_and_answer_of_a_scrape():
    # An NVIDIA node of 6,400 series (1.5 MB in, 1.8 MB out): 5 MiB; at 4 MiB its gzip scrapes still faulted.
    assert trim_threshold_for(1_830_020, 1_518_820) == 5 * 1024 * 1024
    # An AMD node of as many series sends twice the bytes per series: its heap top went back at 4 MiB.
    kept = trim_threshold_for(2_450_000, 2_853_535)
    assert kept >= 1.5 * (2_450_000 + 2_853_535) and kept % (1024 * 1024) == 0
    # Rounded up to a MiB: answers a few bytes apart from scrape to scrape call mallopt once, not every time.
    assert trim_threshold_for(2_450_000, 2_853_535) == trim_threshold_for(2_450_100, 2_853_600)


def test_a_body_past_the_mmap_threshold_gives_the_heap_top_back_too():
    assert trim_threshold_for(3_000_000, MMAP_THRESHOLD_BYTES) == DEFAULT_TRIM_THRESHOLD_BYTES


def test_answers_past_the_mmap_threshold_give_the_heap_top_back():
    # Their buffers are mapped on their own: keeping the heap's top would only raise the peak.
    assert trim_threshold_for(MMAP_THRESHOLD_BYTES) == DEFAULT_TRIM_THRESHOLD_BYTES
    assert trim_threshold_for(7_000_000) == DEFAULT_TRIM_THRESHOLD_BYTES


def test_tuning_and_fitting_run_in_a_real_process():
    """mallopt through ctypes, in a process of its own so that this one's allocator is left alone."""
    code = ("from exporter.base.memory import tune_malloc, fit_heap_to_answer\n"
            "assert tune_malloc({}) is True\n"
            "fit_heap_to_answer(7_000_000); fit_heap_to_answer(1_000); fit_heap_to_answer(2_450_000, 2_853_535)\n"
            "print(bytes(8 * 1024 * 1024)[:1])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "b'\\x00'\n"
