"""Starting one VictoriaMetrics binary (Debian's victoria-metrics package: victoria-metrics, vmagent, vmalert)
for a test, on a free loopback port, and stopping it.

VictoriaMetrics cannot report a port 0 it was given, so a free one is probed, and taken again if another
process won the race; its log goes to the folder it was given, for a failing test to show."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path
from typing import Sequence

from support.child_processes import stop_process
from support.prometheus_server import free_port
from support.waiting import wait_until

INSTALL = "apt-get install -y victoria-metrics (.ci/system-packages.sh does)"
START_SECONDS = 20.0


class VmProcess:
    """`binary` started with `flags` in `folder`, answering /health; `prefix` (e.g. /prometheus): its
    -http.pathPrefix, part of `url`."""

    def __init__(self, binary: str, folder: Path, flags: Sequence[str], prefix: str = ""):
        self.log = folder / f"{Path(binary).name}.log"
        if prefix:
            flags = [f"-http.pathPrefix={prefix}", *flags]
        for _attempt in range(3):  # the free port can be taken between probing and binding
            address = f"127.0.0.1:{free_port()}"
            self.url = f"http://{address}{prefix}"
            with self.log.open("ab") as log:
                self.proc = subprocess.Popen([binary, f"-httpListenAddr={address}", "-loggerLevel=WARN", *flags],
                                             cwd=folder, stdout=log, stderr=subprocess.STDOUT)
            if wait_until(self._state, START_SECONDS, 0.1, f"{binary} to answer /health or exit") == "ready":
                return
        raise RuntimeError(f"{binary} did not start: {self.log.read_text()[-2000:]}")

    def _state(self) -> str:
        """"ready", "exited" (the port was taken after all), or "" while it starts."""
        if self.proc.poll() is not None:
            return "exited"
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as answer:
                return "ready" if answer.status == 200 else ""
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.proc)
