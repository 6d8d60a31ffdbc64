"""A real headless browser (Debian's chromium) reading a page: its DOM after loading, or a screenshot."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from typing import List, Optional

# What a headless run needs on a CI machine and as root (--no-sandbox), and what keeps it from reaching
# any host but the page's own (no update checks, sync or field trials).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
         "--hide-scrollbars")
INSTALL_HINT = "apt-get install chromium (.ci/system-packages.sh installs it)"
TIMEOUT_SECONDS = 60


def find_chromium() -> Optional[str]:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _run(chromium: str, args: List[str]) -> str:
    with tempfile.TemporaryDirectory(prefix="pgx-chromium-") as profile:
        run = subprocess.run([chromium, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                             text=True, timeout=TIMEOUT_SECONDS)
    if run.returncode != 0:
        raise RuntimeError(f"chromium exited with {run.returncode}: {run.stderr.strip()[-2000:]}")
    return run.stdout


def dump_dom(chromium: str, url: str) -> str:
    """The page's DOM as the browser built it (scripts would have run; the node page has none)."""
    return _run(chromium, ["--virtual-time-budget=2000", "--dump-dom", url])


def screenshot(chromium: str, url: str, path: str, width: int = 1400, height: int = 1000) -> None:
    """A PNG of the page at that window size."""
    _run(chromium, [f"--screenshot={path}", f"--window-size={width},{height}", url])
