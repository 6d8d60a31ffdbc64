"""Benchmark: what the exporter costs a user, and where it stands against its performance goals.

Run from the repository root: `python benchmarks/perf.py` (about five minutes on 2 cores), or
`python benchmarks/perf.py --size small` for a quick run that only checks that everything works.

For each node size it starts a simulated dcgm-exporter on loopback that answers like the real one
(Go's net/http: chunked, no Content-Length; `--upstream-render-ms` adds its render time), a gRPC
kubelet on a unix socket where every GPU instance belongs to a pod, and the real exporter process.
It measures, in one run:

- idle CPU (no scrapes; the kubelet is still listed every refresh interval), from the exporter's
  /proc/PID/task/*/schedstat (nanoseconds, unlike the 10 ms ticks of /proc/PID/stat);
- scrapes with new values every time (dcgm-exporter collects every 30 s; Prometheus scrapes every
  15-30 s and asks for gzip), with and without gzip, and with an unchanged body: the latency a client
  sees, the exporter's CPU per scrape, and its own mean rewrite time (from its /metrics);
- peak RSS (VmHWM), and what a user pays in millicores at a 15 s and a 1 s scrape interval;
- in this process: prometheus_client parse + render of the same body, and gzip of the answer alone,
  the references for the ratios;
- with `--amd`, the same for an AMD node of about as many series as the reference size (benchmarks/amd_node.py:
  AMD's exporter text, chunked as its promhttp server sends it, 4 KiB at most a chunk, and compressed if
  the exporter asks for gzip; its identity service on a unix socket, its sysfs tree; the exporter run with
  `--gpu.vendor amd`), and its CPU per series against the NVIDIA body's, measured in the same run, both
  separately and side by side; side by side also against an NVIDIA body whose lines a padding label makes as
  long as AMD's, which tells what AMD's longer lines cost from what its own handling does.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, NamedTuple
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from node import REPO_ROOT, SIZES, Node, Shape, describe  # noqa: E402
from amd_node import AmdNode  # noqa: E402

sys.path.insert(0, str(REPO_ROOT / "tests"))
from exporter.core.mapping import build_mapping  # noqa: E402
from exporter.exposition.rewriter import Rewriter  # noqa: E402
from exporter.web.scrape import ScrapeBody  # noqa: E402
from exporter.vendors.amd.demo_identity import DemoIdentityService  # noqa: E402
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS  # noqa: E402
from support.exporter_process import start_exporter  # noqa: E402
from support.fake_dcgm import FakeDcgmExporter  # noqa: E402
from support.fake_kubelet import FakeKubelet  # noqa: E402

# Distinct bodies served in turn, so that every "new values" scrape brings values the exporter has
# not seen last time (the direct scrapes in between take bodies too; 7 is prime to both).
_CHANGING_BODIES = 7
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Plan(NamedTuple):
    sizes: Dict[str, Shape]
    scrapes: int  # per variant, per side
    warmup: int
    idle_seconds: float
    repeats: int  # in-process timings
    paired_rounds: int = 12  # --amd: rounds of the three exporters scraped side by side (paired_rounds below)


PLANS = {
    "full": Plan({"800": SIZES["whole"], "6,400": SIZES["large"], "25,600": SIZES["xlarge"]},
                 scrapes=150, warmup=10, idle_seconds=60, repeats=7),
    # The 6,400-series node alone, for comparing two versions side by side (run each in its own tree).
    "medium": Plan({"6,400": SIZES["large"]}, scrapes=150, warmup=10, idle_seconds=5, repeats=7),
    "small": Plan({"60": SIZES["small"]}, scrapes=10, warmup=2, idle_seconds=1, repeats=2, paired_rounds=2),
}


class Client:
    """One kept-alive HTTP connection, as Prometheus keeps one per target."""

    def __init__(self, url: str, gzip_requested: bool):
        parts = urlsplit(url)
        self._path = parts.path
        self._connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        self._headers = {"Accept-Encoding": "gzip"} if gzip_requested else {}

    def get(self) -> bytes:
        try:
            self._connection.request("GET", self._path, headers=self._headers)
            response = self._connection.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            # The exporter closes a connection idle for 30 s, as /metrics' is while a slow machine
            # takes longer over a variant's scrapes; Prometheus then connects again too.
            self._connection.close()
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
    """utime + stime of a whole process, exited threads included, from /proc/PID/stat (10 ms ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def thread_cpu_seconds(pid: int) -> Dict[str, int]:
    """CPU nanoseconds of each live thread, from /proc/PID/task/*/schedstat (the 10 ms ticks of
    /proc/PID/stat are too coarse for an idle process)."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            threads[task.name] = int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass  # a thread that ended between the listing and the read
    return threads


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def self_counter(client: Client, name: str) -> float:
    match = re.search(rb"^%s (\S+)$" % name.encode(), client.get(), re.MULTILINE)
    return float(match.group(1)) if match else float("nan")


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class Variant(NamedTuple):
    direct_p50: float
    p50: float
    p99: float
    cpu_per_scrape: float
    rewrite_mean: float  # seconds per rewrite inside the server; nan when nothing was rewritten

    def line(self, label: str) -> str:
        rewrite = "" if self.rewrite_mean != self.rewrite_mean else f" | rewrite in server {self.rewrite_mean * 1e3:5.2f} ms"
        return (f"  {label:<22} exporter p50 {self.p50 * 1e3:6.2f} ms p99 {self.p99 * 1e3:6.2f} ms "
                f"(p99/p50 {self.p99 / self.p50:4.2f}) | direct p50 {self.direct_p50 * 1e3:6.2f} ms | "
                f"exporter CPU {self.cpu_per_scrape * 1e3:6.2f} ms/scrape{rewrite}")


def measure(direct: Client, through: Client, metrics: Client, pid: int, plan: Plan) -> Variant:
    """Interleaved scrapes (the order flips every round so neither side always goes first)."""
    for _ in range(plan.warmup):
        direct.get(), through.get()
    times: dict = {"direct": [], "exporter": []}
    rewrites, rewrite_seconds = (self_counter(metrics, f"pod_gpu_exporter_{name}_total")
                                 for name in ("rewrites", "rewrite_seconds"))
    cpu_before = cpu_seconds(pid)
    for round_number in range(plan.scrapes):
        order = (("direct", direct), ("exporter", through))
        for side, client in order if round_number % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            client.get()
            times[side].append(time.perf_counter() - started)
    cpu = (cpu_seconds(pid) - cpu_before) / plan.scrapes
    rewrites = self_counter(metrics, "pod_gpu_exporter_rewrites_total") - rewrites
    rewrite_seconds = self_counter(metrics, "pod_gpu_exporter_rewrite_seconds_total") - rewrite_seconds
    exporter = times["exporter"]
    return Variant(statistics.median(times["direct"]), statistics.median(exporter), percentile(exporter, 0.99),
                   cpu, rewrite_seconds / rewrites if rewrites else float("nan"))


def measure_idle(pid: int, seconds: float) -> float:
    """Millicores while nobody scrapes: what each thread alive at the end used over the period (a
    thread that ended meanwhile, a closed connection's, would take its whole past with it)."""
    before = thread_cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_since(pid, before) / seconds * 1000


def cpu_since(pid: int, before: Dict[str, int]) -> float:
    """CPU seconds used since `before` (thread_cpu_seconds) by each thread alive now, a new one's whole."""
    return sum(total - before.get(thread, 0) for thread, total in thread_cpu_seconds(pid).items()) / 1e9


class SizeResult(NamedTuple):
    series: int
    idle_millicores: float
    new_values_gzip: Variant
    new_values_plain: Variant
    peak_rss_mib: float
    body_bytes: int = 0  # the upstream's answer


class Started(NamedTuple):
    """A node's exporter running on its simulated upstream, kubelet (and identity service)."""

    exporter: object  # support.exporter_process's handle
    upstream: FakeDcgmExporter
    bodies: List[bytes]
    check: Callable[[bytes], None]
    series: int
    node: object  # the Node or AmdNode simulated


@contextlib.contextmanager
def nvidia_node(shape: Shape, workdir: Path, padding_bytes: int = 0) -> Iterator[Started]:
    """The NVIDIA body of this shape, each series `padding_bytes` longer (node.Node), and the exporter on it."""
    node = Node(shape, padding_bytes)
    bodies = [node.render(generation) for generation in range(_CHANGING_BODIES)]
    socket_path = Path(tempfile.mkdtemp(prefix="n", dir=workdir)) / "kubelet.sock"  # one of each node at once
    with FakeKubelet(str(socket_path)) as kubelet, FakeDcgmExporter(bodies[0]) as dcgm:
        kubelet.set_devices(node.allocations())
        exporter = start_exporter(["--dcgm.url", dcgm.url, "--kubelet.socket", str(socket_path)])
        try:
            yield Started(exporter, dcgm, bodies, lambda text: check_attribution(text, node), node.series, node)
        finally:
            exporter.stop()


@contextlib.contextmanager
def amd_node(series: int, workdir: Path) -> Iterator[Started]:
    """The AMD body of about `series` series (benchmarks/amd_node.py): its exporter over HTTP, its identity
    service on a unix socket, its sysfs tree, every partition held by a pod; the exporter run with --gpu.vendor amd."""
    node = AmdNode(series, gpus=8 if series >= 1000 else 1)
    bodies = [node.render(generation) for generation in range(_CHANGING_BODIES)]
    workdir = Path(tempfile.mkdtemp(prefix="a", dir=workdir))  # its own: one of each node at once
    node.write_sysfs(workdir / "amd-sys")
    socket_path, identity_socket = workdir / "kubelet-amd.sock", workdir / "amd-identity.sock"
    # Answering as promhttp does (4 KiB chunks, gzip if the client asks for it) unless --upstream-sized.
    with FakeKubelet(str(socket_path)) as kubelet, FakeDcgmExporter(bodies[0], promhttp=True) as upstream, \
            DemoIdentityService(str(identity_socket), states=node.identity_states):
        kubelet.set_devices(node.allocations())
        exporter = start_exporter(["--gpu.vendor", "amd", "--amd.metrics-url", upstream.url, "--amd.metrics-socket",
                                   str(identity_socket), "--amd.sysfs-root", str(workdir / "amd-sys"),
                                   "--kubelet.socket", str(socket_path)])
        try:
            yield Started(exporter, upstream, bodies, lambda text: check_amd_attribution(text, node), node.series,
                          node)
        finally:
            exporter.stop()


def run_size(label: str, shape: Shape, plan: Plan, args: argparse.Namespace, workdir: Path) -> SizeResult:
    with nvidia_node(shape, workdir) as started:
        print(f"\n== {label} series: {describe(started.node, started.bodies[0])}, "
              f"{len(started.node.allocations())} pods holding GPUs")
        return _measured(started, plan, args)


def run_amd(label: str, series: int, plan: Plan, args: argparse.Namespace, workdir: Path) -> SizeResult:
    with amd_node(series, workdir) as started:
        node = started.node
        print(f"\n== AMD {label} series: {node.series} series of {len(node.gpus)} MI300X partitions (8 GPUs in CPX "
              f"mode), {len(started.bodies[0]) / 1e6:.2f} MB, {len(node.allocations())} pods holding partitions")
        return _measured(started, plan, args)


class Paired(NamedTuple):
    """AMD's CPU per series over NVIDIA's, one ratio per round, with and without gzip; and over an NVIDIA body
    padded to AMD's bytes per series (`same_bytes_*`), which tells AMD's own costs from its longer lines'."""

    plain: List[float]
    gzip: List[float]
    same_bytes_plain: List[float]
    same_bytes_gzip: List[float]
    batch: int
    bytes_per_series: Dict[str, float]  # each side's upstream text per series


def paired_rounds(shape: Shape, amd_series: int, plan: Plan, args: argparse.Namespace, workdir: Path) -> Paired:
    """Three exporters running at once, each on its own simulated node (NVIDIA's, AMD's, and NVIDIA's with a
    padding label that makes its lines as long as AMD's), scraped with new values in turn in batches, the order
    rotated every round so that each is first, second and last as often: each round's ratios compare batches
    that ran a few hundred milliseconds apart, under the same load, where the separate runs above are a minute
    apart and this machine's load moves more than the difference between them."""
    batch = max(3, plan.scrapes // plan.paired_rounds)
    with amd_node(amd_series, workdir) as amd, nvidia_node(shape, workdir) as nvidia, \
            nvidia_node(shape, workdir, _padding_to(amd, nvidia)) as padded:
        named = {"nvidia": nvidia, "padded": padded, "amd": amd}
        clients: List[Client] = []
        try:
            sides = []
            for name, started in named.items():
                answer_as_asked(started.upstream, args)
                first = Client(started.exporter.url("/gpu/metrics"), False)
                clients.append(first)
                wait_attributed(first, started.check)
                started.upstream.body = _cycle(started.bodies)
                both = (first, Client(started.exporter.url("/gpu/metrics"), True))
                clients.append(both[1])
                for client in both:
                    for _ in range(plan.warmup):
                        client.get()
                sides.append((name, started, both))
            ratios: Dict[str, List[float]] = {key: [] for key in ("plain", "gzip", "same_bytes_plain", "same_bytes_gzip")}
            for round_number in range(plan.paired_rounds):
                for variant, key in ((0, "plain"), (1, "gzip")):
                    per_series = {}
                    turn = round_number % len(sides)
                    for name, started, both in sides[turn:] + sides[:turn]:
                        pid = started.exporter.proc.pid
                        before = thread_cpu_seconds(pid)
                        for _ in range(batch):
                            both[variant].get()
                        per_series[name] = cpu_since(pid, before) / batch / started.series
                    ratios[key].append(per_series["amd"] / per_series["nvidia"])
                    ratios["same_bytes_" + key].append(per_series["amd"] / per_series["padded"])
        finally:
            for client in clients:
                client.close()
        bytes_per_series = {name: len(started.bodies[0]) / started.series for name, started in named.items()}
    return Paired(batch=batch, bytes_per_series=bytes_per_series, **ratios)


def _padding_to(longer: Started, shorter: Started) -> int:
    """How many bytes each series of `shorter` (one sample line each) needs to have as many per series as `longer`."""
    return round(len(longer.bodies[0]) / longer.series - len(shorter.bodies[0]) / shorter.series)


def answer_as_asked(upstream: FakeDcgmExporter, args: argparse.Namespace) -> None:
    """The simulated upstream chunked or sized, and as slow to render, as the command line asks."""
    upstream.chunked = not args.upstream_sized
    upstream.render_seconds = args.upstream_render_ms / 1000


def _measured(started: Started, plan: Plan, args: argparse.Namespace) -> SizeResult:
    """Idle CPU, then scrapes of an unchanged body and of new values (plain and gzip), and peak RSS, of an
    exporter started on its simulated upstream exporter (answering like Go's server)."""
    exporter, upstream, bodies, check, series, _ = started
    answer_as_asked(upstream, args)
    pid = exporter.proc.pid
    clients: List[Client] = []
    try:
        first = Client(exporter.url("/gpu/metrics"), False)
        wait_attributed(first, check)
        first.close()  # the exporter closes connections idle for 30 s: new ones after the idle time
        idle = measure_idle(pid, plan.idle_seconds)
        print(f"  idle: {idle:.3f} millicores over {plan.idle_seconds:.0f} s (no scrapes; the kubelet is "
              "listed every 5 s)")
        metrics = Client(exporter.url("/metrics"), False)
        plain, gzipped = Client(exporter.url("/gpu/metrics"), False), Client(exporter.url("/gpu/metrics"), True)
        direct = Client(upstream.url, False)
        clients = [metrics, plain, gzipped, direct]
        unchanged = measure(direct, plain, metrics, pid, plan)
        print(unchanged.line("unchanged body"))
        upstream.body = _cycle(bodies)
        new_plain = measure(direct, plain, metrics, pid, plan)
        print(new_plain.line("new values"))
        new_gzip = measure(direct, gzipped, metrics, pid, plan)
        print(new_gzip.line("new values, gzip"))
        rss = peak_rss_mib(pid)
        print(f"  peak RSS (VmHWM): {rss:.1f} MiB")
        for interval in (15, 1):
            paid = idle + new_gzip.cpu_per_scrape / interval * 1000
            print(f"  a user pays at a {interval:>2} s scrape interval (gzip, new values every scrape, idle "
                  f"included): {paid:6.2f} millicores")
    finally:
        for client in clients:
            client.close()
    return SizeResult(series, idle, new_gzip, new_plain, rss, len(bodies[0]))


def wait_attributed(client: Client, check: Callable[[bytes], None], seconds: float = 20.0) -> None:
    """Scrape until `check` passes (the first mapping, and on AMD the identity service's first answer, may take
    a refresh or two); its last failure ends the run."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            check(client.get())
            return
        except SystemExit:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


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
    expected = len(node.families) * len(node.gpus) * max(1, len(node.instances))  # MIG: instance samples only
    if attributed != expected:
        raise SystemExit(f"benchmark setup broken: {attributed} attributed series, expected {expected}")


def check_amd_attribution(text: bytes, node: AmdNode) -> None:
    """Every partition's samples attributed to its own pod: fail loudly rather than time an exporter that
    attributes nothing."""
    attributed = {line.split(b'gpu_id="', 1)[1].split(b'"', 1)[0] for line in text.splitlines()
                  if b'gpu_id="' in line and b',pod="pod-' in line}
    if len(attributed) != len(node.gpus):
        raise SystemExit(f"benchmark setup broken: {len(attributed)} AMD partitions attributed, expected {len(node.gpus)}")


def cpu_time(action: Callable[[], object], repeats: int) -> float:
    """Median CPU seconds of this process per call."""
    timings = []
    for _ in range(repeats):
        started = time.process_time()
        action()
        timings.append(time.process_time() - started)
    return statistics.median(timings)


class InProcess(NamedTuple):
    parse_render: float
    refill: float
    gzip_answer: float


def in_process(shape: Shape, plan: Plan) -> InProcess:
    """prometheus_client parse + render of a body, the rewriter's refill of it, and gzip of the answer."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    node = Node(shape)
    bodies = [node.render(generation) for generation in range(plan.repeats + 2)]
    text = bodies[0].decode()

    class Families:
        def collect(self):
            return text_string_to_metric_families(text)

    registry = CollectorRegistry()
    registry.register(Families())
    parse_render = cpu_time(lambda: generate_latest(registry), plan.repeats)
    warm = Rewriter(build_mapping(DEVICE_FORMS, node.allocations()))
    warm.rewrite(bodies[0])
    pending = iter(bodies[1:])
    refill = cpu_time(lambda: warm.rewrite(next(pending)), plan.repeats)
    if warm.refills != plan.repeats:  # the same bytes either way: only the count tells what was timed
        raise SystemExit(f"perf: {plan.repeats - warm.refills} of the {plan.repeats} timed rewrites were not "
                         "refills; the refill figure would be wrong")
    answer = warm.rewrite(bodies[0]).text
    gzip_answer = cpu_time(lambda: ScrapeBody((answer,)).gzip_parts(), plan.repeats)  # as the exporter compresses
    return InProcess(parse_render, refill, gzip_answer)


def amd_summary(amd: SizeResult, nvidia: SizeResult, paired: Paired, label: str) -> None:
    """CPU per series of the AMD body against the NVIDIA body of the same size, measured in this run."""
    print(f"\n== AMD against NVIDIA at {label} series (this run)")
    sizes = paired.bytes_per_series
    print(f"  side by side ({len(paired.plain)} rounds of {paired.batch} new-values scrapes of each of three exporters, all "
          f"running): exporter CPU per series, median of the rounds (lowest-highest); upstream text per series: "
          f"AMD {sizes['amd']:.0f} bytes, NVIDIA {sizes['nvidia']:.0f}, NVIDIA padded {sizes['padded']:.0f}")
    for name, ratios, same_bytes in (("plain", paired.plain, paired.same_bytes_plain),
                                     ("gzip", paired.gzip, paired.same_bytes_gzip)):
        print(f"    {name}: AMD / NVIDIA {_spread(ratios)} (goal <= 1.00x); "
              f"AMD / NVIDIA padded to AMD's bytes per series {_spread(same_bytes)}")
    print("  the separate runs above:")
    for variant in ("new_values_plain", "new_values_gzip"):
        a, n = getattr(amd, variant), getattr(nvidia, variant)
        per_a, per_n = a.cpu_per_scrape / amd.series, n.cpu_per_scrape / nvidia.series
        print(f"  {variant.replace('_', ' ')}: AMD {per_a * 1e6:.3f} us per series ({amd.series} series, "
              f"{a.cpu_per_scrape * 1e3:.2f} ms/scrape), NVIDIA {per_n * 1e6:.3f} us ({nvidia.series} series, "
              f"{n.cpu_per_scrape * 1e3:.2f} ms/scrape): AMD / NVIDIA {_ratio(per_a, per_n)}")
        per_mb_a, per_mb_n = a.cpu_per_scrape / amd.body_bytes * 1e6, n.cpu_per_scrape / nvidia.body_bytes * 1e6
        print(f"    per MB of upstream text: AMD {per_mb_a * 1e3:.2f} ms ({amd.body_bytes / 1e6:.2f} MB), NVIDIA "
              f"{per_mb_n * 1e3:.2f} ms ({nvidia.body_bytes / 1e6:.2f} MB): AMD / NVIDIA {_ratio(per_mb_a, per_mb_n)}")
    print(f"  peak RSS: AMD {amd.peak_rss_mib:.1f} MiB, NVIDIA {nvidia.peak_rss_mib:.1f} MiB")
    print(f"  idle: AMD {amd.idle_millicores:.3f} millicores (its identity service is asked too, and sysfs read when it "
          f"may have changed), NVIDIA {nvidia.idle_millicores:.3f}")


def summary(results: Dict[str, SizeResult], references: InProcess, reference_label: str) -> None:
    middle = results[reference_label]
    per_series = {label: result.new_values_plain.cpu_per_scrape / result.series for label, result in results.items()}
    print("\n== against the goals (docs/performance.md)")
    print(f"  new-values rewrite inside the server at {reference_label} series: "
          f"{middle.new_values_plain.rewrite_mean * 1e3:.2f} ms (goal <= 2.5 ms)")
    print(f"  in this process at {reference_label}: prometheus_client parse+render {references.parse_render * 1e3:.1f} ms CPU, "
          f"refill {references.refill * 1e3:.2f} ms ({references.parse_render / references.refill:.0f}x)")
    print(f"  exporter CPU per new-values scrape vs parse+render: "
          f"{_ratio(references.parse_render, middle.new_values_plain.cpu_per_scrape)} cheaper (goal >= 80x)")
    print(f"  the same with gzip: {_ratio(references.parse_render, middle.new_values_gzip.cpu_per_scrape)} cheaper "
          "(goal >= 50x)")
    print("  CPU per series, new values: " + ", ".join(
        f"{label}: {value * 1e6:.3f} us" for label, value in per_series.items())
        + f"; largest / smallest {_ratio(per_series[list(results)[-1]], per_series[next(iter(results))])} (goal <= 1.3x)")
    print("  p99/p50 with new values (gzip): " + ", ".join(
        f"{label}: {result.new_values_gzip.p99 / result.new_values_gzip.p50:.2f}" for label, result in results.items())
        + " (goal <= 2.5)")
    print("  peak RSS: " + ", ".join(f"{label}: {result.peak_rss_mib:.1f} MiB" for label, result in results.items())
          + " (goal <= 64 MiB at 6,400, <= 100 MiB at 25,600)")
    print("  idle: " + ", ".join(f"{label}: {result.idle_millicores:.3f}" for label, result in results.items())
          + " millicores (goal <= 0.5)")
    gzip_extra = middle.new_values_gzip.cpu_per_scrape - middle.new_values_plain.cpu_per_scrape
    print(f"  gzip at {reference_label}: {gzip_extra * 1e3:.2f} ms more exporter CPU per scrape; compressing the answer "
          f"alone takes {references.gzip_answer * 1e3:.2f} ms, so {(gzip_extra - references.gzip_answer) * 1e3:+.2f} ms "
          "beside the compression")


def _spread(ratios: List[float]) -> str:
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def _ratio(numerator: float, denominator: float) -> str:
    # /proc/PID/stat counts CPU in 10 ms ticks: a short run (--size small) may see none.
    return f"{numerator / denominator:.2f}x" if denominator else "n/a (too few scrapes to count CPU)"


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(PLANS), default="full",
                        help="full: the figures in docs/performance.md; medium: the 6,400-series node alone; small: a quick check that it runs")
    parser.add_argument("--scrapes", type=int, help="scrapes per side and variant (default: by --size)")
    parser.add_argument("--idle-seconds", type=float, help="how long idle CPU is measured (default: by --size)")
    parser.add_argument("--upstream-render-ms", type=float, default=0.0,
                        help="time the simulated dcgm-exporter takes to render each answer (default 0)")
    parser.add_argument("--upstream-sized", action="store_true",
                        help="answer with a Content-Length instead of chunked as Go's server does")
    parser.add_argument("--amd", action="store_true",
                        help="also an AMD node of about as many series as the reference size (benchmarks/amd_node.py), "
                             "run with --gpu.vendor amd, and its CPU per series against NVIDIA's")
    args = parser.parse_args(argv)
    plan = PLANS[args.size]
    if args.scrapes:
        plan = plan._replace(scrapes=args.scrapes)
    if args.idle_seconds is not None:
        plan = plan._replace(idle_seconds=args.idle_seconds)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {plan.scrapes} scrapes per side and variant; "
          f"upstream answers {'with a Content-Length' if args.upstream_sized else 'chunked'}, "
          f"render delay {args.upstream_render_ms:g} ms; latencies of the whole HTTP request as the client sees it")
    workdir = Path(tempfile.mkdtemp(prefix="pgx-bench-", dir="/tmp"))  # unix socket paths must be short
    try:
        results = {label: run_size(label, shape, plan, args, workdir) for label, shape in plan.sizes.items()}
        reference_label = "6,400" if "6,400" in plan.sizes else next(iter(plan.sizes))
        amd = paired = None
        if args.amd:
            amd = run_amd(reference_label, results[reference_label].series, plan, args, workdir)
            paired = paired_rounds(plan.sizes[reference_label], results[reference_label].series, plan, args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    summary(results, in_process(plan.sizes[reference_label], plan), reference_label)
    if amd is not None:
        amd_summary(amd, results[reference_label], paired, reference_label)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
