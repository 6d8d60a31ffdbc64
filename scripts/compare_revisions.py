#!/usr/bin/env python3
"""Old and new exporter side by side on the same fake kubelet and dcgm-exporter: is what NVIDIA nodes serve unchanged?

    .venv/bin/python scripts/compare_revisions.py OLD_REV [--fixtures DIR]

OLD_REV is checked out into a temporary git worktree; both revisions run as processes of this checkout's
Python (each with its own tree first on PYTHONPATH) against one fake kubelet (real gRPC on a unix socket)
and one dcgm-exporter (real HTTP) per fixture. Compared, per fixture: /gpu/metrics byte for byte (the
two values that are times, the scrape duration and the mapping age, masked; the vendor port's status gauges
pod_gpu_exporter_upstream_up and pod_gpu_exporter_vendor_info, and each pod's numbers — pod_gpu_utilization_ratio
and pod_gpu_memory_used_bytes, a block at the end — taken out of both answers after checking the new one's
values, so that OLD_REV may be from before or after them), the family names of /metrics, each
route's status, `mapping -o json` and `top -o json` (its rows' `vendor` field checked to be nvidia, then
taken out)
(through a fake API server's pod proxy). Then the demo at fixed moments (its simulated clocks frozen by
scripts/frozen_demo.py, which both revisions run), and the flags, variables and defaults of --help.
Prints one line per comparison and a summary; exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from exporter.demo.fake_upstream import FakeUpstreamExporter  # noqa: E402
from exporter.demo.fake_kubelet import FakeKubelet  # noqa: E402
from exporter.sources.kubelet import AllocatedDevice  # noqa: E402

DEFAULT_FIXTURES = Path("/work/shared/fixtures/dcgm")
NEW_ONLY = ("pod_gpu_exporter_upstream_up", "pod_gpu_exporter_vendor_info")
# Each pod's numbers on the node, added after the vendor port: a block of their own at the end of the answer, taken
# out of both answers like the gauges above once pod_numbers_hold has checked where and what they are.
POD_NUMBERS = ("pod_gpu_utilization_ratio", "pod_gpu_memory_used_bytes")
# Values that are times this process measured (durations, ages, a counter of real seconds), masked.
TIMED = ("pod_gpu_exporter_scrape_duration_seconds", "pod_gpu_exporter_mapping_age_seconds",
         "pod_gpu_exporter_process_shares_refresh_duration_seconds", "pod_gpu_container_idle_seconds_total")
DEMO_MOMENTS = (10.0, 75.0, 200.0)  # seconds into the demo's simulated life: before and after its GPU is lost
_LISTENING = re.compile(r"msg=listening .*?address=(\S+) scheme=(\w+)")
_HELP_FLAG = re.compile(r"(--[a-z0-9.-]+)(?: [A-Z{][^\s]*)?\s+(?:(?!\s--[a-z]).)*?\[env (\S+)\] \(default: (.*?)\)(?=\s+--|\s+-o|\s*$)",
                        re.S)


class Revision:
    """One checkout's exporter, run as a process of this Python with that tree first on the path."""

    def __init__(self, name: str, tree: Path):
        self.name, self.tree = name, tree

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("POD_GPU_EXPORTER_")}
        env["PYTHONPATH"] = f"{self.tree}{os.pathsep}{self.tree / 'tests'}"
        return env

    def run(self, args: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=self.tree, env=self.env(),
                              capture_output=True, text=True, timeout=timeout)

    def start(self, args: Sequence[str], script: Optional[Path] = None) -> "Running":
        command = [sys.executable, str(script)] if script else [sys.executable, "-m", "exporter"]
        proc = subprocess.Popen(command + [*args, "--web.listen-address", "127.0.0.1:0"], cwd=self.tree,
                                env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return Running(proc)


class Running:
    """A started exporter: its address, read from its listening log line."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.address = ""
        self._log: List[str] = []
        # Read on a thread of its own for the process's whole life: a full pipe would stall its logging.
        threading.Thread(target=lambda: self._log.extend(proc.stderr), daemon=True).start()
        deadline = time.monotonic() + 30
        while not self.address:
            match = _LISTENING.search("".join(self._log))
            if match:
                self.address = match.group(1)
            elif proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"exporter did not start:\n{''.join(self._log)}")
            else:
                time.sleep(0.05)

    def get(self, path: str) -> Tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://{self.address}{path}", timeout=20) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def allocations_for(text: str) -> List[AllocatedDevice]:
    """Holders for a fixture's GPUs, in the device-ID forms its samples can be matched by: the first GPU
    shared by two pods (time-slicing replicas), every other whole GPU held by a pod of its own, each MIG
    instance by the old drivers' MIG-GPU-<uuid>/<gi>/0 form; index IDs where samples carry no UUID."""
    uuids = list(dict.fromkeys(re.findall(r'\bUUID="(GPU-[^"]+)"', text, re.I)))
    instances = list(dict.fromkeys(re.findall(r'\bUUID="(GPU-[^"]+)"[^}]*\bGPU_I_ID="(\d+)"', text)))
    devices: List[AllocatedDevice] = []
    if not uuids:
        indices = list(dict.fromkeys(re.findall(r'\bgpu="(\d+)"', text)))
        return [AllocatedDevice("default", f"job-{index}", "main", "nvidia.com/gpu", index) for index in indices]
    devices += [AllocatedDevice("team-a", "shared-a", "main", "nvidia.com/gpu", f"{uuids[0]}::0"),
                AllocatedDevice("team-b", "shared-b", "worker", "nvidia.com/gpu", f"{uuids[0]}::1")]
    mig_parents = {uuid for uuid, _ in instances}
    devices += [AllocatedDevice("default", f"job-{n}", "main", "nvidia.com/gpu", uuid)
                for n, uuid in enumerate(uuids[1:], 1) if uuid not in mig_parents]
    devices += [AllocatedDevice("ml", f"mig-{uuid[4:12]}-{gi}", "main", "nvidia.com/mig-1g.10gb", f"MIG-{uuid}/{gi}/0")
                for uuid, gi in instances]
    return devices


def masked(text: str) -> str:
    """The answer with its time values masked, and without the gauges the vendor port added (from both sides,
    so that a revision that has them already compares too; the new one's are checked by new_gauges_hold)."""
    lines = []
    for line in text.splitlines(keepends=True):
        name = _family_of(line)
        if name in NEW_ONLY or name in POD_NUMBERS:
            continue
        if not line.startswith("#") and name in TIMED:
            line = line.rstrip("\n").rpartition(" ")[0] + " <time>\n"
        lines.append(line)
    return "".join(lines)


def pod_numbers_hold(text: str) -> bool:
    """Each pod's numbers come last, after every other line, each utilisation a ratio and each memory whole bytes."""
    lines = text.splitlines()
    first = next((n for n, line in enumerate(lines) if _family_of(line) in POD_NUMBERS), len(lines))
    for line in lines[first:]:
        name = _family_of(line)
        if name not in POD_NUMBERS:
            return False
        if not line.startswith("#"):
            value = float(line.rpartition(" ")[2])
            if not (0.0 <= value <= 1.0 if name == POD_NUMBERS[0] else value >= 0 and value == int(value)):
                return False
    return True


def _family_of(line: str) -> str:
    return line.split(" ", 3)[2] if line.startswith("# ") and line.count(" ") >= 2 else re.split(r"[{ ]", line, 1)[0]


def new_gauges_hold(text: str) -> bool:
    """upstream_up equals dcgm_up, the vendor is nvidia, and each pod's numbers stand apart at the end."""
    if not pod_numbers_hold(text):
        return False
    dcgm = re.search(r"(?m)^pod_gpu_exporter_dcgm_up (\d)$", text)
    upstream = re.search(r"(?m)^pod_gpu_exporter_upstream_up (\d)$", text)
    return bool(dcgm and upstream and dcgm.group(1) == upstream.group(1)
                and re.search(r'(?m)^pod_gpu_exporter_vendor_info\{vendor="nvidia"\} 1$', text))


def family_names(metrics: bytes) -> List[str]:
    return [line.split()[2] for line in metrics.decode().splitlines() if line.startswith("# TYPE ")]


def first_difference(old: str, new: str) -> str:
    for number, (a, b) in enumerate(zip(old.splitlines(), new.splitlines()), 1):
        if a != b:
            return f"line {number}: old {a[:160]!r} new {b[:160]!r}"
    return f"lengths differ: old {len(old.splitlines())} lines, new {len(new.splitlines())}"


class Report:
    def __init__(self) -> None:
        self.same, self.different = 0, []

    def check(self, what: str, old, new, extra_ok: bool = True) -> None:
        ok = old == new and extra_ok
        print(f"{'same' if ok else 'DIFFERENT'}  {what}", flush=True)
        if ok:
            self.same += 1
            return
        detail = first_difference(old, new) if isinstance(old, str) and old != new else f"old {old!r} new {new!r}"
        self.different.append(f"{what}: {detail if old != new else 'new status gauges wrong'}")
        print(f"           {self.different[-1]}", flush=True)


def settled(exporter: Running, devices: int) -> str:
    """The answer once the first mapping is in (kubelet up and, with allocations, their rows)."""
    deadline = time.monotonic() + 30
    while True:
        status, body = exporter.get("/gpu/metrics")
        text = body.decode()
        if status == 200 and "pod_gpu_exporter_kubelet_up 1" in text and (not devices or "pod_gpu_allocation_info{" in text):
            return text
        if time.monotonic() > deadline:
            raise RuntimeError(f"no settled answer from {exporter.address}: {text[-400:]}")
        time.sleep(0.1)


def top_json(revision: Revision, exporter: Running, work: Path) -> str:
    """`top -o json` of one exporter, read through a fake API server's pod proxy."""
    from support.fake_pod_proxy import PodProxyApi
    from support.top_runs import add_exporter_pod, kubeconfig_for

    api = PodProxyApi().start()
    try:
        add_exporter_pod(api, "pod-gpu-metrics-exporter-x1", "gpu-node-1", exporter.address)
        folder = work / f"top-{revision.name}"
        folder.mkdir(exist_ok=True)
        run = revision.run(["top", "--kubeconfig", kubeconfig_for(api, folder), "-o", "json", "--window", "1s"])
    finally:
        api.stop()
    return run.stdout if run.returncode == 0 else f"exit {run.returncode}: {run.stderr.strip()}"


def compare_fixture(path: Path, old: Revision, new: Revision, work: Path, report: Report) -> None:
    text = path.read_text()
    devices = allocations_for(text)
    socket = str(work / f"kubelet-{path.stem[:40]}.sock")
    with ExitStack() as stack:
        kubelet = FakeKubelet(socket)
        kubelet.set_devices(devices)
        kubelet.start()
        stack.callback(kubelet.stop)
        dcgm = FakeUpstreamExporter(path.read_bytes())
        dcgm.start()
        stack.callback(dcgm.stop)
        args = ["--kubelet.socket", socket, "--dcgm.url", dcgm.url, "--kubernetes.api", "off"]
        running = {}
        for revision in (old, new):
            running[revision.name] = stack.enter_context(_stopping(revision.start(args)))
        answers = {name: settled(exporter, len(devices)) for name, exporter in running.items()}
        report.check(f"{path.name}: /gpu/metrics ({len(devices)} allocations)", masked(answers["old"]),
                     masked(answers["new"]), new_gauges_hold(answers["new"]))
        names = {name: family_names(exporter.get("/metrics")[1]) for name, exporter in running.items()}
        report.check(f"{path.name}: /metrics family names", names["old"], names["new"])
        routes = {name: [exporter.get(route)[0] for route in ("/", "/healthz", "/metrics", "/gpu/metrics", "/nope")]
                  for name, exporter in running.items()}
        report.check(f"{path.name}: route statuses", routes["old"], routes["new"])
        mapping = {revision.name: revision.run(["mapping", "--kubelet.socket", socket, "-o", "json"]).stdout
                   for revision in (old, new)}
        report.check(f"{path.name}: mapping -o json", mapping["old"], mapping["new"], _is_json(mapping["new"]))
        tops = {revision.name: top_json(revision, running[revision.name], work) for revision in (old, new)}
        vendors_told = all(row.get("vendor") == "nvidia" for row in _rows(tops["new"]))
        report.check(f"{path.name}: top -o json ({len(_rows(tops['new']))} rows, vendor added)",
                     _normalised(tops["old"], drop_vendor=True), _normalised(tops["new"], drop_vendor=True),
                     (bool(_rows(tops["new"])) or not devices) and vendors_told)


def _is_json(text: str) -> bool:
    try:
        return bool(json.loads(text))
    except ValueError:
        return False


def _normalised(text: str, drop_vendor: bool = False) -> str:
    """top's JSON written one way, with the `vendor` field every row of the new code gains taken out (the mixed
    fleet's addition, checked to be nvidia by the caller; taken out of a revision that has it already too); an
    error's text as it is."""
    if not _is_json(text):
        return text
    answer = json.loads(text)
    for row in answer.get("rows", []) if drop_vendor else ():
        row.pop("vendor", None)
    return json.dumps(answer, indent=2)


def _rows(text: str) -> list:
    """top's rows, none when it printed no JSON (an error compares the same in both, and is no proof)."""
    return json.loads(text).get("rows", []) if _is_json(text) else []


class _stopping:
    def __init__(self, exporter: Running):
        self.exporter = exporter

    def __enter__(self) -> Running:
        return self.exporter

    def __exit__(self, *exc) -> None:
        self.exporter.stop()


def compare_demo(old: Revision, new: Revision, report: Report) -> None:
    """The demo with its simulated clocks frozen at a few moments: every answer the same."""
    script = REPO / "scripts" / "frozen_demo.py"
    for moment in DEMO_MOMENTS:
        for nvml in ("on", "off"):
            running = {}
            try:
                for revision in (old, new):
                    running[revision.name] = revision.start(["--moment", str(moment), "--demo.nvml", nvml],
                                                            script=script)
                answers = {name: _demo_settled(exporter, nvml) for name, exporter in running.items()}
                report.check(f"demo at {moment:g}s, --demo.nvml {nvml}: /gpu/metrics", masked(answers["old"]),
                             masked(answers["new"]), new_gauges_hold(answers["new"]))
                names = {name: family_names(exporter.get("/metrics")[1]) for name, exporter in running.items()}
                report.check(f"demo at {moment:g}s, --demo.nvml {nvml}: /metrics family names", names["old"],
                             names["new"])
            finally:
                for exporter in running.values():
                    exporter.stop()


def _demo_settled(exporter: Running, nvml: str) -> str:
    """The demo's answer once every source has had its first reading and a second refresh of the shares
    (their energy counters count from the first): the same answer twice in a row."""
    deadline, last = time.monotonic() + 40, None
    while time.monotonic() < deadline:
        text = masked(exporter.get("/gpu/metrics")[1].decode())
        ready = "pod_gpu_exporter_kubernetes_api_up 1" in text and "pod_gpu_hpc_job_info{" in text and (
            nvml == "off" or "pod_gpu_container_energy_joules_total{" in text)
        if ready and text == last:
            return exporter.get("/gpu/metrics")[1].decode()
        last = text if ready else None
        time.sleep(2.5)
    raise RuntimeError(f"the demo at {exporter.address} did not settle")


def help_contract(revision: Revision) -> Dict[str, Tuple[str, str]]:
    """flag → (environment variable, default), as --help lists them."""
    text = " ".join(revision.run(["--help"]).stdout.split())
    return {flag: (env, default) for flag, env, default in _HELP_FLAG.findall(text)}


def _amd_node_flag(flag: str) -> bool:
    """A flag of AMD nodes only (--amd.*): listed by --help, never read on an NVIDIA node."""
    return flag.startswith("--amd.")


def compare_help(old: Revision, new: Revision, report: Report) -> None:
    before, after = help_contract(old), help_contract(new)
    added = sorted(flag for flag in set(after) - set(before) if not _amd_node_flag(flag))
    # --gpu.vendor is the vendor port's one new flag on NVIDIA nodes: compared aside (an old revision may have it).
    kept = {flag: value for flag, value in before.items() if flag != "--gpu.vendor" and not _amd_node_flag(flag)}
    report.check("--help: flags, variables and defaults (--gpu.vendor added; AMD nodes' --amd.* aside)", kept,
                 {flag: value for flag, value in after.items() if flag != "--gpu.vendor" and not _amd_node_flag(flag)},
                 set(added) <= {"--gpu.vendor"}
                 and after.get("--gpu.vendor") == ("POD_GPU_EXPORTER_GPU_VENDOR", "auto"))
    print(f"           {len(before)} flags before, {len(after)} after; added: {', '.join(added) or 'none'}")


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old_rev")
    parser.add_argument("--fixtures", type=Path, default=DEFAULT_FIXTURES)
    parser.add_argument("--no-demo", action="store_true", help="leave out the demo's comparison")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="compare-revisions-"))
    tree = work / "old"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(tree), args.old_rev],
                   check=True)
    report = Report()
    try:
        old, new = Revision("old", tree), Revision("new", REPO)
        for path in sorted(args.fixtures.glob("*.prom")):
            compare_fixture(path, old, new, work, report)
        if not args.no_demo:
            compare_demo(Revision("old", tree), new, report)
        compare_help(old, new, report)
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nsummary: {report.same} comparisons the same, {len(report.different)} different "
          f"(old {args.old_rev}, new {subprocess.run(['git', '-C', str(REPO), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()})")
    for line in report.different:
        print(f"  {line}")
    return 1 if report.different else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
