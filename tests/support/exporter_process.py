"""Runs the real exporter as a child process on an ephemeral port, for end-to-end tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from support.child_processes import stop_process
from support.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
_LISTENING = re.compile(r"msg=listening .*?address=(\S+) scheme=(\w+)")
# The exporters the running test started, in order (tests/conftest.py empties it before each test):
# a failing test's report shows their logs, which tell a crash or an error log from a test's mistake.
STARTED: List["ExporterProcess"] = []


class ExporterProcess:
    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self._lines: List[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.address: Optional[str] = None
        self.scheme = "http"

    def _drain(self) -> None:
        for line in self.proc.stderr:
            with self._lock:
                self._lines.append(line)

    def stderr_text(self) -> str:
        with self._lock:
            return "".join(self._lines)

    def wait_for_log(self, *needles: str, timeout_seconds: float = 15.0) -> str:
        """The log once it holds every needle. What the exporter logs while it runs (at a refresh, a
        scrape, a reload) reaches this process later, through the pipe and the reader thread: a log
        read once right after the event may not hold it yet."""
        return self._wait_for(lambda text: text if all(n in text for n in needles) else "", timeout_seconds,
                              f"the exporter's log to hold {needles}")

    def wait_for_lines(self, *needles: str, count: int = 1, timeout_seconds: float = 15.0) -> List[str]:
        """The log's lines holding every needle, once there are at least `count` of them."""
        def lines(text: str) -> List[str]:
            found = [line for line in text.splitlines() if all(n in line for n in needles)]
            return found if len(found) >= count else []
        return self._wait_for(lines, timeout_seconds, f"{count} line(s) of the exporter's log holding {needles}")

    def _wait_for(self, found: Callable[[str], object], timeout_seconds: float, describe: str):
        def look():
            done = not self._reader.is_alive()  # read before the text: a finished reader has read it all
            value = found(self.stderr_text())
            if not value and done:
                raise AssertionError(f"waited for {describe}, but the exporter exited ({self.proc.poll()}) "
                                     f"without writing it:\n{self.stderr_text()}")
            return value
        return wait_until(look, timeout_seconds, 0.02, describe)

    def wait_listening(self, timeout_seconds: float) -> None:
        try:
            match = wait_until(self._listening, timeout_seconds, 0.02, "the exporter's listening log line")
        except AssertionError:
            raise RuntimeError(f"exporter did not start listening in {timeout_seconds}s:\n{self.stderr_text()}") from None
        self.address, self.scheme = match.group(1), match.group(2)

    def _listening(self):
        """The listening line's match, or None while starting; raises once the process has exited."""
        match = _LISTENING.search(self.stderr_text())
        if match is None and self.proc.poll() is not None:
            raise RuntimeError(f"exporter exited with {self.proc.returncode}:\n{self.stderr_text()}")
        return match

    def url(self, path: str = "/gpu/metrics") -> str:
        return f"{self.scheme}://{self.address}{path}"

    def stop(self, sig: int = signal.SIGTERM, timeout_seconds: float = 10.0) -> int:
        stop_process(self.proc, sig, timeout_seconds)
        self._reader.join(2)
        return self.proc.returncode


def exporter_command() -> List[str]:
    return [sys.executable, "-m", "exporter"]


def exporter_env(extra: Optional[dict] = None) -> dict:
    """This environment without POD_GPU_EXPORTER_* (a test sets what it means to), the repo importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POD_GPU_EXPORTER_")}
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra or {})
    return env


def start_exporter(args: Sequence[str], env: Optional[dict] = None, timeout_seconds: float = 20.0,
                   command: Optional[List[str]] = None) -> ExporterProcess:
    """Start `python -m exporter ARGS` (or COMMAND ARGS) listening on 127.0.0.1:0 unless ARGS say
    otherwise; wait for it."""
    args = list(args)
    if not any(a.startswith("--web.listen-address") for a in args):
        args += ["--web.listen-address", "127.0.0.1:0"]
    proc = subprocess.Popen(
        (command or exporter_command()) + args, cwd=str(REPO_ROOT), env=exporter_env(env),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    handle = ExporterProcess(proc)
    STARTED.append(handle)
    try:
        handle.wait_listening(timeout_seconds)
    except BaseException:
        handle.stop(signal.SIGKILL)
        raise
    return handle
