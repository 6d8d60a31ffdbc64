"""Soak: the exporter's memory (VmRSS / VmHWM from /proc) under hostile upstream answers, bounded in time.

Run from the repository root: `python benchmarks/soak.py` (a few minutes on 2 cores), or
`python benchmarks/soak.py --scrapes 60 --foreign-mib 4` for a quick look. Two scenarios against the
real exporter process, a simulated dcgm-exporter (HTTP, loopback) and a gRPC kubelet on a unix socket:

- churn: the large benchmark node (benchmarks/node.py, 6,400 series) where every series carries a
  label value that changes on every scrape (the worst case of short-lived pods or XID messages);
  RSS is printed every --report-every scrapes, with the growth after warm-up.
- foreign bodies: answers a wrong --dcgm.url could bring, just under the exporter's body cap: a
  kube-state-metrics-like text of long unique series, and one of tiny unique lines (the most Python
  objects per byte); each is scraped a few times and the peak RSS printed.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, List
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from node import REPO_ROOT, SIZES, Node  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "tests"))
from exporter.vendors.nvidia.dcgm import DEFAULT_MAX_BODY_BYTES  # noqa: E402
from support.exporter_process import start_exporter  # noqa: E402
from support.fake_dcgm import FakeDcgmExporter  # noqa: E402
from support.fake_kubelet import FakeKubelet  # noqa: E402

MIB = 2**20


def proc_status_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Scraper:
    """One kept-alive connection to the exporter's telemetry path."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        self._path = parts.path
        self._connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)

    def get(self) -> bytes:
        self._connection.request("GET", self._path)
        response = self._connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"exporter answered {response.status}")
        return body


def churning_bodies(node: Node) -> Callable[[], bytes]:
    """The next body on every request: new values, and a new `Hostname` value on every series."""
    template = node.render(0)
    hostname = node.gpus[0].hostname.encode()
    state = {"generation": 0}

    def next_body() -> bytes:
        state["generation"] += 1
        return template.replace(hostname, b"churn-%d" % state["generation"])

    return next_body


def kube_state_metrics_like(size: int) -> bytes:
    """Long unique series, as kube-state-metrics serves them, up to `size` bytes."""
    lines, total, number = [b"# HELP kube_pod_info Information about pod.", b"# TYPE kube_pod_info gauge"], 0, 0
    while total < size:
        line = (b'kube_pod_info{namespace="team-%d",pod="worker-%d-7d9f8b6c4-x%05d",uid="%08x-1111-2222-3333-'
                b'444455556666",host_ip="10.0.%d.%d",node="gpu-node-%d",created_by_kind="ReplicaSet"} 1'
                % (number % 97, number, number % 99991, number, number % 250, number % 251, number % 64))
        lines.append(line)
        total += len(line) + 1
        number += 1
    return b"\n".join(lines)[: size - 1].rsplit(b"\n", 1)[0] + b"\n"


def tiny_unique_lines(size: int) -> bytes:
    """The most lines per byte: `a{b="N"} 1`, every one a new series."""
    count = size // 16
    return b"".join(b'a{b="%x"} 1\n' % number for number in range(count))[:size].rsplit(b"\n", 1)[0] + b"\n"


def soak_churn(args, workdir: Path) -> None:
    node = Node(SIZES["large"])
    print(f"== churn: large node ({node.series} series), every series' Hostname value new on every scrape, "
          f"{args.scrapes} scrapes")
    with FakeKubelet(str(workdir / "churn.sock")) as kubelet, FakeDcgmExporter(churning_bodies(node)) as dcgm:
        kubelet.set_devices(node.allocations())
        exporter = start_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", str(workdir / "churn.sock")]
                                  + args.exporter_args)
        try:
            client, pid = Scraper(exporter.url()), exporter.proc.pid
            warm: List[float] = []
            for scrape in range(1, args.scrapes + 1):
                client.get()
                if scrape % args.report_every == 0 or scrape == args.scrapes:
                    rss = proc_status_mib(pid, "VmRSS")
                    if scrape >= args.warmup and not warm:
                        warm.append(rss)
                    growth = f"  growth since warm-up {100 * (rss / warm[0] - 1):+.1f}%" if warm else ""
                    print(f"  scrape {scrape:5d}: VmRSS {rss:6.1f} MiB  VmHWM {proc_status_mib(pid, 'VmHWM'):6.1f} MiB"
                          f"{growth}", flush=True)
        finally:
            exporter.stop()


def soak_foreign(args, workdir: Path) -> None:
    size = int(args.foreign_mib * MIB)
    bodies = {"kube-state-metrics-like": kube_state_metrics_like(size), "tiny unique lines": tiny_unique_lines(size)}
    with FakeKubelet(str(workdir / "foreign.sock")) as kubelet:
        kubelet.set_devices(Node(SIZES["small"]).allocations())
        for title, body in bodies.items():
            with FakeDcgmExporter(body) as dcgm:
                exporter = start_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", str(workdir / "foreign.sock"),
                                           "--dcgm.timeout", "60s"] + args.exporter_args)
                try:
                    client, pid = Scraper(exporter.url()), exporter.proc.pid
                    before = proc_status_mib(pid, "VmHWM")
                    started = time.perf_counter()
                    answer = client.get()  # the only rewrite: later scrapes of the same body reuse it
                    first = time.perf_counter() - started
                    for _ in range(args.foreign_scrapes - 1):
                        answer = client.get()
                    up = b"pod_gpu_exporter_dcgm_up 1" in answer
                    lines = body.count(b"\n")
                    print(f"== foreign body: {title}, {len(body) / MIB:.1f} MiB, {lines} lines: "
                          f"VmHWM {before:.1f} -> {proc_status_mib(pid, 'VmHWM'):.1f} MiB after "
                          f"{args.foreign_scrapes} scrapes (first {first:.2f} s, dcgm_up {int(up)}), "
                          f"VmRSS {proc_status_mib(pid, 'VmRSS'):.1f} MiB", flush=True)
                finally:
                    exporter.stop()


def parse_args(argv: List[str]):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--scrapes", type=int, default=1500, help="churn scrapes (default 1500)")
    parser.add_argument("--warmup", type=int, default=100, help="scrapes before the growth baseline (default 100)")
    parser.add_argument("--report-every", type=int, default=100, help="print RSS every N scrapes (default 100)")
    parser.add_argument("--foreign-mib", type=float, default=(DEFAULT_MAX_BODY_BYTES - 1) / MIB,
                        help="foreign body size in MiB (default: just under the exporter's default cap)")
    parser.add_argument("--foreign-scrapes", type=int, default=3)
    parser.add_argument("--skip", choices=("churn", "foreign"), action="append", default=[])
    parser.add_argument("exporter_args", nargs="*", help="extra exporter flags, after --")
    return parser.parse_args(argv)


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pgx-soak-", dir="/tmp") as workdir:
        if "foreign" not in args.skip:
            soak_foreign(args, Path(workdir))
        if "churn" not in args.skip:
            soak_churn(args, Path(workdir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
