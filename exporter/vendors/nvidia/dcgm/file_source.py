"""The legacy dcgm textfile (--dcgm.file): read whole, never torn, within --dcgm.timeout."""

from __future__ import annotations

import os
import stat
import threading
import time
from typing import NamedTuple, Optional, Tuple

from exporter.base.errors import UpstreamError
from exporter.vendors.nvidia.dcgm.options import DcgmFileOptions

# A file changed in place less than this long ago may be in the middle of a rewrite (a writer that
# truncates, or writes over the old text, and pauses between its write() calls): it is read only once
# it has been left alone this long. A file renamed into place is whole the moment it appears.
SETTLE_SECONDS = 1.0
# While a fresh file settles, how often the path is looked at again: a writer that renames a new file
# over it shows itself by the inode changing, and that file is read at once rather than after the wait.
RENAME_POLL_SECONDS = 0.02


class _Version(NamedTuple):
    """What tells one version of the file from another without reading it."""

    inode: int
    size: int
    mtime_ns: int


class FileSource:
    """The legacy dcgm textfile (e.g. /run/prometheus/dcgm.prom), read whole on every fetch.

    Writers that replace the file by rename are always read whole: the open file keeps the inode
    it opened. Writers that rewrite it in place (truncate, then write; or write over the old text)
    can be caught half way, and no lock tells us when they are done. So a read is accepted only if
    fstat shows the same inode, size and mtime before and after it, it holds exactly that many
    bytes and ends with a newline (a write() stalled part way leaves a stable but cut file), and the
    file is settled: the very version accepted last, a new inode at the path since an earlier look
    (the last accepted version, or a fresh one seen while this fetch waited: renamed into place), or
    left unchanged for SETTLE_SECONDS. A fresh file of unknown origin (at start-up, or the same inode
    as before) is waited for until it settles or the path's inode changes, within --dcgm.timeout; one
    that does neither is reported (`timeout`). A torn or cut body is never handed on.
    """

    _ATTEMPTS = 4
    _RETRY_PAUSE_SECONDS = 0.01

    def __init__(self, options: DcgmFileOptions) -> None:
        self.path = os.fspath(options.path)
        self.max_bytes = int(options.max_body_bytes)
        self.timeout_seconds = float(options.timeout_seconds)
        self._lock = threading.Lock()
        self._blocked: Optional[threading.Thread] = None  # a read that outlived its deadline
        self._accepted: Optional[_Version] = None  # the version of the file last handed on

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
        # A moment short of the scrape's own wait: a file that never settles is then reported as such,
        # not as a read that did not return.
        deadline = time.monotonic() + self.timeout_seconds * 0.95
        attempt = 0
        seen: Optional[_Version] = None  # a whole read of this fetch that was too fresh to trust
        while attempt < self._ATTEMPTS:
            data, whole, version = self._read_once(deadline)
            if whole and data:
                if self._trusted(version, seen):
                    self._accepted = version
                    return data
                # Written moments ago, and not known to be renamed into place: perhaps mid-write. Read
                # again once it has been left alone long enough, or at once if a new file replaces it
                # (the deadline check of the next read ends a wait that is too long).
                seen = version
                self._wait_for_settle_or_rename(version, deadline)
                continue
            attempt += 1
            # Empty is retried too: an in-place rewrite shows it empty between truncate and write.
            pause = self._RETRY_PAUSE_SECONDS * attempt
            if attempt < self._ATTEMPTS and time.monotonic() + pause < deadline:
                time.sleep(pause)
        if whole:
            raise UpstreamError(f"dcgm textfile {self.path} is empty: has dcgm-exporter written its "
                                "first collection yet?", reason="empty")
        raise UpstreamError(f"dcgm textfile {self.path} was changing or cut short (no final newline) "
                            f"in {self._ATTEMPTS} reads in a row: if its writer rewrites it in place, "
                            "writing a temporary file and renaming it over this one avoids that",
                            reason="truncated")

    def _trusted(self, version: _Version, seen: Optional[_Version]) -> bool:
        """Whether a whole read of `version` is one whole version of the file, not a rewrite caught part way."""
        accepted = self._accepted
        if version == accepted:
            return True  # exactly what was handed on last: no write since
        # The path's inode changed since an earlier look: a new file renamed into place, written whole
        # before it appeared. Before any version was accepted (start-up) the earlier look is this
        # fetch's own, so a writer renaming faster than SETTLE_SECONDS is read at its next rename.
        if any(earlier is not None and version.inode != earlier.inode for earlier in (accepted, seen)):
            return True
        return self._unsettled_seconds(version) <= 0  # left alone long enough to have been finished

    @staticmethod
    def _unsettled_seconds(version: _Version) -> float:
        """How much longer `version` must be left alone before it can be trusted (<= 0: none)."""
        return SETTLE_SECONDS - (time.time_ns() - version.mtime_ns) / 1e9

    def _wait_for_settle_or_rename(self, version: _Version, deadline: float) -> None:
        """Sleep until `version` has settled, the path names another inode, or the deadline comes."""
        while True:
            left = min(self._unsettled_seconds(version), deadline - time.monotonic())
            if left <= 0:
                return
            time.sleep(min(left, RENAME_POLL_SECONDS))
            try:
                if os.stat(self.path).st_ino != version.inode:
                    return
            except OSError:
                return  # gone or unreadable: the next read says which

    def _read_once(self, deadline: float) -> Tuple[bytes, bool, _Version]:
        """Returns (bytes, whether they are known to be one whole version of the file, that version)."""
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
        version = _Version(after.st_ino, after.st_size, after.st_mtime_ns)
        unchanged = _Version(before.st_ino, before.st_size, before.st_mtime_ns) == version
        # The text format ends every line, the last included, with "\n"; a writer caught in the
        # middle of a write() shows a stable size that almost never ends on one.
        whole = unchanged and len(data) == after.st_size and (data.endswith(b"\n") or not data)
        return data, whole, version

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
