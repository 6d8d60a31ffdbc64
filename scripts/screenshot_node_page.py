#!/usr/bin/env python3
"""Run the demo and take a picture of its node page (/) with a real headless chromium.

    python scripts/screenshot_node_page.py [--output docs/images/node-page.png]

It waits until the demo's story is told (GPU 3 lost, notebook-7's use seen), scrapes /gpu/metrics once
so that the device figures are fresh, then shoots the page at 1400x1000.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))

from exporter.vendors.nvidia.demo.nvml import LOST_AFTER_SECONDS  # noqa: E402
from support.browser import INSTALL_HINT, find_chromium, screenshot  # noqa: E402
from support.demo_process import node_page_told  # noqa: E402
from support.exporter_process import start_exporter  # noqa: E402
from support.waiting import wait_until  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "docs" / "images" / "node-page.png"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="the PNG to write (default: %(default)s)")
    args = parser.parse_args(argv)
    chromium = find_chromium()
    if chromium is None:
        print(f"screenshot_node_page: error: chromium not found: {INSTALL_HINT}", file=sys.stderr)
        return 1
    demo = start_exporter(["demo"])
    try:
        def page() -> str:
            return requests.get(demo.url("/"), timeout=10).text

        wait_until(lambda: node_page_told(page()), timeout_seconds=LOST_AFTER_SECONDS + 30,
                   describe="GPU 3 lost, the XID events registered again and notebook-7's use on the page")
        requests.get(demo.url(), timeout=10).raise_for_status()  # the device figures of a fresh scrape
        args.output.parent.mkdir(parents=True, exist_ok=True)
        screenshot(chromium, demo.url("/"), str(args.output))
    finally:
        demo.stop()
    print(f"wrote {args.output} ({args.output.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
