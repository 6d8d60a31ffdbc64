"""Command lines a page of docs/ gives, run as a shell runs such simple ones (leading VAR=value assignments, a
trailing `&`, `> FILE`), with the loopback ports, the scratch folder and the installed program substituted so
that tests running side by side do not collide; nothing else of a line is changed."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Callable, Dict, List, Optional

from support.child_processes import stop_process
from support.exporter_process import REPO_ROOT, exporter_env

_PORT = re.compile(r"127\.0\.0\.1:(\d+)")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def sh_blocks(text: str) -> List[List[str]]:
    """The lines of each ```sh block of `text`."""
    return [block.splitlines() for block in re.findall(r"```sh\n(.*?)```", text, re.DOTALL)]


class Substitutions:
    """A page's loopback ports → ports of this test (each the same wherever it recurs), and literal replacements."""

    def __init__(self, new_port: Callable[[], int], fixed: Optional[Dict[str, str]] = None,
                 ports: Optional[Dict[int, int]] = None):
        self._new_port = new_port
        self._fixed = dict(fixed or {})
        self.ports: Dict[int, int] = dict(ports or {})

    def __call__(self, line: str) -> str:
        for old, new in self._fixed.items():
            line = line.replace(old, new)
        return _PORT.sub(lambda match: f"127.0.0.1:{self.port(int(match.group(1)))}", line)

    def port(self, documented: int) -> int:
        if documented not in self.ports:
            self.ports[documented] = self._new_port()
        return self.ports[documented]


class Started:
    """The background processes of a recipe, each logging to a file of `folder`; stop() ends them, last first."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.processes: List[subprocess.Popen] = []
        self.logs: List[Path] = []

    def start(self, line: str) -> subprocess.Popen:
        """Start one `… &` line from the checkout (as the page runs it)."""
        assert line.endswith("&"), f"not a background command: {line}"
        env, argv, stdout = _parse(line[:-1])
        log = self.folder / f"{len(self.logs)}-{Path(argv[0]).name}.log"
        with log.open("wb") as err:
            out = open(stdout, "wb") if stdout else err  # noqa: SIM115 - handed to the child, closed below
            try:
                proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=exporter_env(env), stdout=out, stderr=err)
            finally:
                if stdout:
                    out.close()
        self.processes.append(proc)
        self.logs.append(log)
        return proc

    def exited(self) -> List[str]:
        """The logs' tails of those that have exited already."""
        return [f"{log.name} exited {proc.returncode}: {log.read_text(errors='replace')[-1500:]}"
                for proc, log in zip(self.processes, self.logs) if proc.poll() is not None]

    def stop(self) -> None:
        for proc in reversed(self.processes):
            stop_process(proc)


def run(line: str, timeout_seconds: float = 30.0) -> subprocess.CompletedProcess:
    """Run one foreground line from the checkout, its output captured."""
    env, argv, stdout = _parse(line)
    assert stdout is None, f"a foreground line whose output the page shows goes to a file: {line}"
    return subprocess.run(argv, cwd=REPO_ROOT, env=exporter_env(env), capture_output=True, text=True,
                          timeout=timeout_seconds)


def _parse(line: str):
    """(environment assignments, argv, the file `>` sends stdout to, or None)."""
    words = shlex.split(line)
    env = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, value = _ASSIGNMENT.match(words[0]).groups()
        env[name] = value
        words.pop(0)
    stdout = None
    if ">" in words:
        at = words.index(">")
        stdout, words = words[at + 1], words[:at] + words[at + 2:]
    return env, words, stdout
