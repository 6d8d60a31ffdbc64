"""Benchmark: what a scrape through the exporter costs beyond scraping dcgm-exporter directly.

Run from the repository root: `python benchmarks/perf.py` (about two minutes on 2 cores), or
`python benchmarks/perf.py --size small` for a quick run that only checks that everything works.
It starts a simulated dcgm-exporter (HTTP, loopback) serving a synthetic node built from the real
scrapes in tests/data/dcgm (see benchmarks/node.py), a gRPC kubelet on a unix socket where every GPU
instance belongs to a pod, and the real exporter process; then alternates scrapes through the exporter
with direct scrapes of the simulated dcgm-exporter over one kept-alive connection each, and prints
latencies, the exporter's peak RSS and CPU, and an in-process rewrite vs prometheus_client comparison.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, List, NamedTuple
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from node import REPO_ROOT, SIZES, Node, Shape, describe  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "tests"))
from exporter_process import start_exporter  # noqa: E402

from exporter.devices import build_mapping  # noqa: E402
from exporter.exposition import Rewriter  # noqa: E402
from exporter.fake_dcgm import FakeDcgmExporter  # noqa: E402
from exporter.fake_kubelet import FakeKubelet  # noqa: E402
# Distinct bodies served in turn when values move, one request after the other. Between two
# exporter fetches come 0, 1 or 2 direct ones (see measure), so with 5 bodies the exporter never
# gets the body it fetched last time: every "changing body" scrape is a real rewrite.
_CHANGING_BODIES = 5
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Plan(NamedTuple):
    large: Shape
    typical: Shape
    scrapes: int  # per variant, per side
    warmup: int
    repeats: int  # in-process timings


PLANS = {
    "full": Plan(SIZES["large"], SIZES["typical"], scrapes=200, warmup=10, repeats=7),
    "small": Plan(SIZES["small"], Shape(gpus=2, instances_per_gpu=0, families=5), scrapes=10, warmup=2, repeats=2),
}


class Client:
    """One kept-alive HTTP connection, as Prometheus keeps one per target."""

    def __init__(self, url: str, gzip_requested: bool):
        parts = urlsplit(url)
        self._path = parts.path
        self._connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        self._headers = {"Accept-Encoding": "gzip"} if gzip_requested else {}

    def get(self) -> bytes:
        self._connection.request("GET", self._path, headers=self._headers)
        response = self._connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {self._path} answered {response.status}: {body[:200]!r}")
        # Decoding is part of a scrape for Prometheus too.
        return gzip.decompress(body) if response.getheader("Content-Encoding") == "gzip" else body

    def close(self) -> None:
        self._connection.close()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/PID/stat (fields 14 and 15, after the command name)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(direct: Client, through: Client, pid: int, plan: Plan) -> dict:
    """Interleaved scrapes (the order flips every round so neither side always goes first)."""
    for _ in range(plan.warmup):
        direct.get(), through.get()
    times: dict = {"direct": [], "exporter": []}
    cpu_before = cpu_seconds(pid)
    for round_number in range(plan.scrapes):
        order = (("direct", direct), ("exporter", through))
        for side, client in order if round_number % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            client.get()
            times[side].append(time.perf_counter() - started)
    cpu = (cpu_seconds(pid) - cpu_before) / plan.scrapes
    return {"times": times, "cpu": cpu}


def report_variant(label: str, result: dict, side: str = "exporter") -> None:
    direct, through = result["times"]["direct"], result["times"]["exporter"]
    d50, e50 = statistics.median(direct), statistics.median(through)
    print(f"  {label:<27} direct p50 {d50 * 1e3:6.2f} ms  p99 {percentile(direct, 0.99) * 1e3:6.2f} ms | "
          f"{side} p50 {e50 * 1e3:6.2f} ms  p99 {percentile(through, 0.99) * 1e3:6.2f} ms | "
          f"p50 ratio {e50 / d50:4.2f} | {side} CPU {result['cpu'] * 1e3:6.2f} ms/scrape")


def run_scenario(title: str, shape: Shape, gzip_requested: bool, plan: Plan, workdir: Path) -> None:
    node = Node(shape)
    bodies = [node.render(generation) for generation in range(_CHANGING_BODIES)]
    print(f"\n== {title}: {describe(node, bodies[0])}, {len(node.allocations())} pods holding GPUs"
          + (", gzip requested from the exporter" if gzip_requested else ""))
    socket_path = workdir / f"kubelet-{title.replace(' ', '-')}.sock"
    with FakeKubelet(str(socket_path)) as kubelet, FakeDcgmExporter(bodies[0]) as dcgm:
        kubelet.set_devices(node.allocations())
        exporter = start_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", str(socket_path)])
        try:
            direct = Client(dcgm.url, gzip_requested)
            through = Client(exporter.url("/gpu/metrics"), gzip_requested)
            check_attribution(through.get(), node)
            report_variant("unchanged body (cached)", measure(direct, through, exporter.proc.pid, plan))
            if not gzip_requested:
                report_floor(dcgm, plan)
            dcgm.body = _cycle(bodies)
            report_variant("changing body", measure(direct, through, exporter.proc.pid, plan))
            print(f"  exporter peak RSS (VmHWM): {peak_rss_mib(exporter.proc.pid):.1f} MiB")
            direct.close(), through.close()
        finally:
            exporter.stop()


def report_floor(dcgm: FakeDcgmExporter, plan: Plan) -> None:
    """The same alternation against benchmarks/relay.py: receive all, send it on, nothing else."""
    relay = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "relay.py"),
                              str(urlsplit(dcgm.url).port)], stdout=subprocess.PIPE)
    try:
        port = int(relay.stdout.readline())
        direct, through = Client(dcgm.url, False), Client(f"http://127.0.0.1:{port}/metrics", False)
        result = measure(direct, through, relay.pid, plan)
        direct.close(), through.close()
    finally:
        relay.kill()
        relay.wait()
    report_variant("bare relay (the floor)", result, side="relay")


def _cycle(bodies: List[bytes]) -> Callable[[], bytes]:
    """A body callable for the simulated dcgm-exporter: the next body on every request."""
    lock = threading.Lock()
    state = {"next": 0}

    def next_body() -> bytes:
        with lock:
            index = state["next"] = (state["next"] + 1) % len(bodies)
        return bodies[index]

    return next_body


def check_attribution(text: bytes, node: Node) -> None:
    """Fail loudly rather than time an exporter that attributes nothing."""
    attributed = sum(1 for line in text.splitlines() if b',pod="' in line and line.startswith(b"DCGM_FI_"))
    expected = len(node.families) * len(node.gpus) * max(1, len(node.instances))
    if attributed != expected:
        raise SystemExit(f"benchmark setup broken: {attributed} attributed series, expected {expected}")
    print(f"  attributed series: {attributed} (every instance sample carries its pod)")


def median_time(action: Callable[[], object], repeats: int) -> float:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def in_process_comparison(shape: Shape, plan: Plan) -> None:
    """The rewriter against a prometheus_client parse + render of the same text, in this process."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    node = Node(shape)
    mapping = build_mapping(node.allocations())
    bodies = [node.render(generation) for generation in range(plan.repeats + 1)]
    text = bodies[0].decode()

    class Families:
        def collect(self):
            return text_string_to_metric_families(text)

    registry = CollectorRegistry()
    registry.register(Families())
    client_time = median_time(lambda: generate_latest(registry), plan.repeats)
    cold_time = median_time(lambda: Rewriter(mapping).rewrite(bodies[0]), plan.repeats)
    warm = Rewriter(mapping)
    warm.rewrite(bodies[0])
    pending = iter(bodies[1:])
    warm_time = median_time(lambda: warm.rewrite(next(pending)), plan.repeats)
    print(f"\n== in-process, {describe(node, bodies[0])}")
    print(f"  prometheus_client parse+render: {client_time * 1e3:7.2f} ms")
    print(f"  rewrite, new values (same series):   {warm_time * 1e3:7.2f} ms  "
          f"({client_time / warm_time:.1f}x faster than parse+render)")
    print(f"  rewrite, first sight (nothing cached):   {cold_time * 1e3:7.2f} ms  "
          f"({client_time / cold_time:.1f}x faster than parse+render)")


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(PLANS), default="full",
                        help="full: the figures in docs/performance.md; small: a quick check that it runs")
    parser.add_argument("--scrapes", type=int, help="scrapes per side and variant (default: by --size)")
    args = parser.parse_args(argv)
    plan = PLANS[args.size]
    if args.scrapes:
        plan = plan._replace(scrapes=args.scrapes)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {plan.scrapes} scrapes per side and variant, "
          "latencies of the whole HTTP request as the client sees it")
    workdir = Path(tempfile.mkdtemp(prefix="pgx-bench-", dir="/tmp"))  # unix socket paths must be short
    try:
        run_scenario("large", plan.large, False, plan, workdir)
        run_scenario("typical", plan.typical, False, plan, workdir)
        run_scenario("large gzip", plan.large, True, plan, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    in_process_comparison(plan.large, plan)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
