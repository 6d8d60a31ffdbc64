"""The legacy dcgm textfile (--dcgm.file): read whole, never torn, within --dcgm.timeout."""

from __future__ import annotations

import os
import stat
import threading
import time
from typing import Optional

from exporter.base.errors import UpstreamError
from exporter.sources.dcgm import DEFAULT_MAX_BODY_BYTES

# A file modified less than this long ago may have been rewritten within one timestamp tick.
_RECENT_WRITE_NS = 100_000_000


class FileSource:
    """The legacy dcgm textfile (e.g. /run/prometheus/dcgm.prom), read whole on every fetch.

    Writers that replace the file by rename are always read whole: the open file keeps the inode
    it opened. Writers that rewrite it in place (truncate, then write) can be caught half way, and
    no lock tells us when they are done, so a read is accepted only if fstat shows the same size
    and mtime before and after it, it holds exactly that many bytes, it ends with a newline (a
    write() stalled part way leaves a stable but cut file), and, when the file changed within the
    last timestamp tick or so, a second read matches it. Otherwise it is retried a few times, then
    reported; a torn read is never handed on knowingly.
    """

    _ATTEMPTS = 4
    _RETRY_PAUSE_SECONDS = 0.01

    def __init__(self, path: str, max_bytes: int = DEFAULT_MAX_BODY_BYTES, timeout_seconds: float = 5.0) -> None:
        self.path = os.fspath(path)
        self.max_bytes = int(max_bytes)
        self.timeout_seconds = float(timeout_seconds)
        self._lock = threading.Lock()
        self._blocked: Optional[threading.Thread] = None  # a read that outlived its deadline

    def describe(self) -> str:
        return self.path

    def fetch(self) -> bytes:
        """The file's text, within --dcgm.timeout whatever the file system does.

        A read() of a regular file cannot be interrupted (a hung network file system never returns
        from it), so the reads run on a thread of their own, waited for at most the timeout. While
        such a read is still blocked, no other is started: one stuck thread at most, not one per scrape.
        """
        outcome: dict = {}
        with self._lock:
            if self._blocked is not None and self._blocked.is_alive():
                raise self._timeout("an earlier read of it has still not returned")
            reader = threading.Thread(target=self._fetch_into, args=(outcome,), name="dcgm-textfile", daemon=True)
            reader.start()
        reader.join(self.timeout_seconds)
        if reader.is_alive():
            with self._lock:
                self._blocked = reader
            raise self._timeout("a read of it did not return")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["data"]

    def _fetch_into(self, outcome: dict) -> None:
        try:
            outcome["data"] = self._fetch_now()
        except Exception as exc:  # raised again on the scrape's own thread
            outcome["error"] = exc

    def _timeout(self, what: str) -> UpstreamError:
        return UpstreamError(f"dcgm textfile {self.path}: {what} within {self.timeout_seconds:g}s (see "
                             "--dcgm.timeout): is its file system hung?", reason="timeout")

    def _fetch_now(self) -> bytes:
        whole = False
        deadline = time.monotonic() + self.timeout_seconds
        for attempt in range(self._ATTEMPTS):
            data, whole, mtime_ns = self._read_once(deadline)
            if whole and data and self._settled(data, mtime_ns, deadline):
                return data
            # Empty is retried too: an in-place rewrite shows it empty between truncate and write.
            pause = self._RETRY_PAUSE_SECONDS * (attempt + 1)
            if attempt + 1 < self._ATTEMPTS and time.monotonic() + pause < deadline:
                time.sleep(pause)
        if whole:
            raise UpstreamError(f"dcgm textfile {self.path} is empty: has dcgm-exporter written its "
                                "first collection yet?", reason="empty")
        raise UpstreamError(f"dcgm textfile {self.path} was changing or cut short (no final newline) "
                            f"in {self._ATTEMPTS} reads in a row: if its writer rewrites it in place, "
                            "writing a temporary file and renaming it over this one avoids that",
                            reason="truncated")

    def _settled(self, data: bytes, mtime_ns: int, deadline: float) -> bool:
        """Whether `data` can be trusted although size and mtime did not change while it was read.

        File timestamps tick coarsely (a few ms), so a same-size rewrite inside one tick escapes
        the fstat check. Only a file modified that recently is read a second time, and the first
        copy is kept only if the second matches it.
        """
        if time.time_ns() - mtime_ns > _RECENT_WRITE_NS:
            return True
        again, whole, _ = self._read_once(deadline)
        return whole and again == data

    def _read_once(self, deadline: float):
        """Returns (bytes, whether they are known to be one whole version of the file, its mtime)."""
        if time.monotonic() >= deadline:
            raise UpstreamError(f"dcgm textfile {self.path} could not be read whole within "
                                f"{self.timeout_seconds:g}s (see --dcgm.timeout): is its writer rewriting it "
                                "in place all the time?", reason="timeout")
        try:
            with open(self._open_regular(), "rb") as handle:
                before = os.fstat(handle.fileno())
                if before.st_size > self.max_bytes:
                    raise self._too_large()
                # One byte more than expected tells "grew while read" from "read to the end".
                data = handle.read(before.st_size + 1)
                after = os.fstat(handle.fileno())
        except FileNotFoundError as exc:
            raise UpstreamError(f"dcgm textfile {self.path} does not exist: is dcgm-exporter writing it, "
                                "and is its folder mounted into this container (see --dcgm.file)?",
                                reason="absent") from exc
        except PermissionError as exc:
            raise UpstreamError(f"dcgm textfile {self.path} is not readable (permission denied): check "
                                "the file's mode and the user this exporter runs as",
                                reason="permission") from exc
        except OSError as exc:
            raise UpstreamError(f"dcgm textfile {self.path} could not be read ({exc.strerror or exc}): "
                                "check --dcgm.file", reason="error") from exc
        if len(data) > self.max_bytes:
            raise self._too_large()
        unchanged = (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns)
        # The text format ends every line, the last included, with "\n"; a writer caught in the
        # middle of a write() shows a stable size that almost never ends on one.
        whole = unchanged and len(data) == after.st_size and (data.endswith(b"\n") or not data)
        return data, whole, after.st_mtime_ns

    def _open_regular(self) -> int:
        """A descriptor of the file, refused unless it is a regular file (O_NONBLOCK: opening a
        FIFO without a writer would otherwise wait for one forever)."""
        descriptor = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            os.close(descriptor)
            raise self._not_regular(mode)
        return descriptor

    def _not_regular(self, mode: int) -> UpstreamError:
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        return UpstreamError(f"dcgm textfile {self.path} is {kind}: --dcgm.file must name the regular file "
                             "dcgm-exporter writes (a pipe or device could block every scrape)",
                             reason="not_regular")

    def _too_large(self) -> UpstreamError:
        return UpstreamError(f"dcgm textfile {self.path} is larger than {self.max_bytes} bytes: is "
                             "--dcgm.file the dcgm-exporter textfile?", reason="too_large")
