"""Load benchmark: many concurrent scrapes of the real exporter for a fixed time, on loopback only.

Run from the repository root: `python benchmarks/load.py [--duration 20] [--concurrency 16]`.
It starts a gRPC kubelet on a unix socket (every GPU and MIG instance of the fixture held by a pod),
a simulated dcgm-exporter on 127.0.0.1 serving a real scrape (tests/data/dcgm) whose values change on
every request, so every scrape is rewritten anew, and the real exporter process. Then clients scrape
/gpu/metrics as fast as they can for --duration seconds, each over its own kept-alive connection as
Prometheus does, and it prints: scrapes, errors, p50/p99 latency, the exporter's RSS before and after
(VmRSS) and its peak (VmHWM), RSS over the run, and the kubelet List calls made during it.
The default client is pure Python (its own process, one thread per connection); `--client hey`
uses `hey` (apt-get install hey) when installed. Everything stops by itself after the run.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import http.client
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, NamedTuple, Tuple
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))
from exporter.sources.kubelet import AllocatedDevice  # noqa: E402
from support.exporter_process import start_exporter  # noqa: E402
from support.fake_dcgm import FakeDcgmExporter  # noqa: E402
from support.fake_kubelet import FakeKubelet  # noqa: E402

DEFAULT_FIXTURE = "a800-8gpu-mig-2g20gb-mixed-excerpt.prom"
_VARIANTS = 7  # distinct bodies served in turn: each scrape sees values other than the last one's
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Outcome(NamedTuple):
    latencies: List[float]  # seconds, successful scrapes only
    errors: Dict[str, int]  # kind -> count


# ---------------------------------------------------------------- the simulated node


def node_bodies(fixture: Path) -> List[bytes]:
    """The fixture with integer values shifted per variant (text otherwise byte for byte)."""
    lines = fixture.read_text().splitlines()
    bodies = []
    for variant in range(_VARIANTS):
        out = []
        for line in lines:
            head, _, value = line.rpartition(" ")
            out.append(f"{head} {int(value) + variant}" if not line.startswith("#") and value.isdigit() else line)
        bodies.append(("\n".join(out) + "\n").encode())
    return bodies


def node_devices(body: bytes) -> List[AllocatedDevice]:
    """One pod per whole GPU and per MIG instance found in the scrape, listed as a device plugin does."""
    devices = {}
    for match in re.finditer(rb'UUID="(GPU-[^"]+)"(?:[^}\n]*?GPU_I_ID="(\d+)")?', body):
        uuid, instance = match.group(1).decode(), (match.group(2) or b"").decode()
        device_id = f"MIG-{uuid}/{instance}/0" if instance else uuid
        resource = "nvidia.com/mig-2g.20gb" if instance else "nvidia.com/gpu"
        pod = f"job-{len(devices)}"
        devices.setdefault(device_id, AllocatedDevice("load", pod, "main", resource, device_id))
    return list(devices.values())


def cycling(bodies: List[bytes]):
    lock, position = threading.Lock(), [0]

    def next_body() -> bytes:
        with lock:
            position[0] = (position[0] + 1) % len(bodies)
            return bodies[position[0]]
    return next_body


# ---------------------------------------------------------------- the exporter process, from /proc


def proc_status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class RssSampler(threading.Thread):
    """VmRSS once a second during the run, to see whether memory grows."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.samples_kib, self.done = pid, [], threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.samples_kib.append(proc_status_kib(self.pid, "VmRSS"))


# ---------------------------------------------------------------- clients


def python_client(url: str, concurrency: int, duration: float, gzip_requested: bool, pipe) -> None:
    """Runs in its own process so the clients do not share a GIL with the simulated node."""
    deadline = time.monotonic() + duration
    results = [Outcome([], collections.Counter()) for _ in range(concurrency)]
    threads = [threading.Thread(target=_scrape_loop, args=(url, deadline, gzip_requested, results[i]))
               for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors: collections.Counter = collections.Counter()
    for result in results:
        errors.update(result.errors)
    pipe.send(Outcome([t for result in results for t in result.latencies], dict(errors)))


def _scrape_loop(url: str, deadline: float, gzip_requested: bool, outcome: Outcome) -> None:
    parts = urlsplit(url)
    headers = {"Accept-Encoding": "gzip"} if gzip_requested else {}
    connection = None
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            connection = connection or http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
            connection.request("GET", parts.path, headers=headers)
            response = connection.getresponse()
            body = response.read()
            if response.getheader("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
        except (OSError, http.client.HTTPException) as exc:
            outcome.errors[type(exc).__name__] += 1
            connection = None
            continue
        elapsed = time.perf_counter() - started
        if response.status != 200:
            outcome.errors[f"HTTP {response.status}"] += 1
        elif b"pod_gpu_exporter_dcgm_up 1" not in body or b'pod="job-' not in body:
            outcome.errors["answer without attributed GPU samples"] += 1
        else:
            outcome.latencies.append(elapsed)


def run_python_clients(url: str, args) -> Outcome:
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=python_client, args=(url, args.concurrency, args.duration, args.gzip, sender),
                              daemon=True)
    process.start()
    try:
        if not receiver.poll(args.duration + 60):
            raise RuntimeError("the client process did not report back in time")
        return receiver.recv()
    finally:
        process.join(10)
        if process.is_alive():
            process.kill()


def run_hey(url: str, args) -> Tuple[Outcome, int]:
    """hey prints a latency distribution, not every latency: p50/p99 are read from it."""
    command = ["hey", "-z", f"{args.duration:g}s", "-c", str(args.concurrency), "-t", "10"]
    if args.gzip:
        command += ["-H", "Accept-Encoding: gzip"]
    out = subprocess.run(command + [url], capture_output=True, text=True, timeout=args.duration + 60).stdout
    statuses = {int(code): int(count) for code, count in re.findall(r"\[(\d+)\]\s+(\d+) responses", out)}
    errors = {f"HTTP {code}": count for code, count in statuses.items() if code != 200}
    error_section = out.split("Error distribution:", 1)[1] if "Error distribution:" in out else ""
    failed = sum(int(count) for count in re.findall(r"^\s+\[(\d+)\]", error_section, re.MULTILINE))
    if failed:
        errors["connection errors"] = failed
    shares = {int(share): float(seconds) for share, seconds in re.findall(r"(\d+)%+ in ([\d.]+) secs", out)}
    # Two values standing in for hey's distribution, so that report() reads the same p50 and p99.
    latencies = [shares[50]] * 98 + [shares[99]] * 2 if statuses.get(200) and 50 in shares and 99 in shares else []
    return Outcome(latencies, errors), sum(statuses.values()) + failed


# ---------------------------------------------------------------- the run


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))] if ordered else float("nan")


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def report(args, outcome: Outcome, scrapes: int, pid: int, rss_before: int, sampler: RssSampler,
           calls: int, cpu: float) -> None:
    rss_after, peak = proc_status_kib(pid, "VmRSS"), proc_status_kib(pid, "VmHWM")
    errors = sum(outcome.errors.values())
    print(f"scrapes:            {scrapes} in {args.duration:g} s ({scrapes / args.duration:.0f}/s), "
          f"{args.concurrency} concurrent clients ({args.client}{', gzip' if args.gzip else ''})")
    print(f"errors:             {errors}" + (f"  {dict(outcome.errors)}" if errors else ""))
    print(f"latency:            p50 {percentile(outcome.latencies, 0.50) * 1e3:.1f} ms, "
          f"p99 {percentile(outcome.latencies, 0.99) * 1e3:.1f} ms")
    print(f"exporter RSS:       before {mib(rss_before)}, after {mib(rss_after)}, peak (VmHWM) {mib(peak)}")
    samples = sampler.samples_kib
    if len(samples) >= 4:
        # VmHWM is updated lazily by the kernel, so the sampled VmRSS may exceed it: both are shown.
        marks = [(len(samples) * quarter) // 4 - 1 for quarter in (1, 2, 3, 4)]
        print("RSS over the run:   " + ", ".join(f"{mark + 1} s {mib(samples[mark])}" for mark in marks)
              + f"; max sampled {mib(max(samples))}")
    bound = int(args.duration / args.refresh_interval) + 1
    print(f"kubelet List calls: {calls} during the run (at most one per {args.refresh_interval:g} s "
          f"refresh interval: <= {bound})")
    print(f"exporter CPU:       {cpu:.1f} s ({cpu / max(scrapes, 1) * 1e3:.2f} ms per scrape)")


def run(args) -> int:
    fixture = REPO_ROOT / "tests" / "data" / "dcgm" / args.fixture
    bodies = node_bodies(fixture)
    workdir = Path(tempfile.mkdtemp(prefix="pgx-load-", dir="/tmp"))  # unix socket paths must be short
    kubelet = FakeKubelet(str(workdir / "kubelet.sock"))
    devices = node_devices(bodies[0])
    kubelet.set_devices(devices)
    dcgm = FakeDcgmExporter(cycling(bodies))
    exporter = None
    try:
        kubelet.start(), dcgm.start()
        exporter = start_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", kubelet.socket_path,
                                   "--kubelet.refresh-interval", f"{args.refresh_interval:g}s"])
        pid = exporter.proc.pid
        print(f"node: {fixture.name}, {len(bodies[0])} bytes per dcgm scrape, {len(devices)} allocated "
              f"devices; exporter pid {pid} at {exporter.url()}")
        warm_up(exporter.url())
        rss_before, calls_before, cpu_before = proc_status_kib(pid, "VmRSS"), kubelet.list_calls, cpu_seconds(pid)
        sampler = RssSampler(pid)
        sampler.start()
        if args.client == "hey":
            outcome, scrapes = run_hey(exporter.url(), args)
        else:
            outcome = run_python_clients(exporter.url(), args)
            scrapes = len(outcome.latencies) + sum(outcome.errors.values())
        sampler.done.set()
        report(args, outcome, scrapes, pid, rss_before, sampler, kubelet.list_calls - calls_before,
               cpu_seconds(pid) - cpu_before)
        return 1 if sum(outcome.errors.values()) else 0
    finally:
        if exporter is not None:
            exporter.stop()
        dcgm.stop()
        kubelet.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def warm_up(url: str) -> None:
    """Scrapes until samples are attributed, then a few more: the figures describe the steady state."""
    parts = urlsplit(url)
    deadline, attributed = time.monotonic() + 30, 0
    while attributed < 20:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not serve attributed samples within 30 s")
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        connection.request("GET", parts.path)
        attributed += b'pod="job-' in connection.getresponse().read()
        connection.close()


def parse_args(argv: List[str]):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load (default 20)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--client", choices=("python", "hey"), default="python",
                        help="python (default, runs anywhere) or hey (must be installed)")
    parser.add_argument("--gzip", action="store_true", help="ask for gzip, as Prometheus does")
    parser.add_argument("--refresh-interval", type=float, default=5.0,
                        help="the exporter's --kubelet.refresh-interval in seconds (default 5)")
    parser.add_argument("--fixture", default=DEFAULT_FIXTURE, help="dcgm scrape from tests/data/dcgm to serve")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.duration > 600 or args.concurrency < 1 or args.concurrency > 512:
        parser.error("--duration must be in (0, 600] and --concurrency in [1, 512]")
    if args.client == "hey" and shutil.which("hey") is None:
        parser.error("--client hey needs hey installed (apt-get install hey); the default python client needs nothing")
    return args


if __name__ == "__main__":
    sys.exit(run(parse_args(sys.argv[1:])))
