"""The fault matrix: the real exporter process while its kubelet or its dcgm-exporter misbehaves.

Every case follows one script: a healthy node first (samples attributed to pod "before"); then the
fault, through at least 3 scrapes and 3 kubelet refresh intervals, during which /gpu/metrics answers
200 with parseable text, the status gauges say what is wrong and the log says it exactly once; then
the fault clears (the kubelet now reports pod "after") and the exporter recovers by itself.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import pytest
import requests

from exporter.sources.kubelet import AllocatedDevice
from support.exporter_process import ExporterProcess, start_exporter
from support.fake_dcgm import FakeDcgmExporter
from support.fake_kubelet import FakeKubelet
from support.fixtures import fixture_bytes
from support.scrape_checks import L4_UUID, assert_parses, sample_lines, scrape
from support.waiting import wait_until

L4 = fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom")
BEFORE = [AllocatedDevice("ns", "before", "c", "nvidia.com/gpu", L4_UUID)]
AFTER = [AllocatedDevice("ns", "after", "c", "nvidia.com/gpu", L4_UUID)]
BASE_ARGS = ["--kubelet.refresh-interval", "200ms", "--kubelet.timeout", "500ms", "--dcgm.timeout", "500ms"]
PROMPT_SECONDS = 10  # "keeps answering promptly": a generous bound, not a timing assertion
MIB = 2**20


@dataclass
class Node:
    """The fakes around one exporter process, and what a fault case may do to them."""

    kubelet: FakeKubelet
    dcgm: FakeDcgmExporter
    socket_dir: str
    exporter: Optional[ExporterProcess] = None


@dataclass
class Fault:
    inject: Callable[[Node], None]
    clear: Callable[[Node], None]
    reason: str  # the reason= of the one warning expected in the log
    during: Callable[[str], None]  # checks one /gpu/metrics answer while the fault lasts
    args: List[str] = field(default_factory=list)  # extra flags; later ones win


# ---------------------------------------------------------------- helpers


def get_checked(exporter: ExporterProcess) -> str:
    """One scrape that must answer 200, in time, with text Prometheus and promtool parse."""
    response = requests.get(exporter.url(), timeout=PROMPT_SECONDS)
    assert response.status_code == 200
    assert_parses(response.text)
    return response.text


def gauge(text: str, name: str) -> Optional[str]:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return match.group(1) if match else None


def list_calls(exporter: ExporterProcess) -> float:
    """Refresh attempts so far, from the exporter's own counter (also counts calls that never reached a kubelet)."""
    return float(gauge(scrape(exporter, "/metrics").text, "pod_gpu_exporter_kubelet_list_calls_total"))


def attributed_to(text: str, pod: str) -> bool:
    return any(line.startswith("DCGM_") and f'pod="{pod}"' in line for line in sample_lines(text))


def log_lines(exporter: ExporterProcess, level: str, dependency: str) -> List[str]:
    return [line for line in exporter.stderr_text().splitlines()
            if f"level={level} " in line and f"dependency={dependency}" in line]


def ride_out(exporter: ExporterProcess, during: Callable[[str], None], scrapes: int = 3, refreshes: int = 3) -> None:
    """Scrape until at least `scrapes` scrapes and `refreshes` kubelet refreshes passed, checking every answer."""
    first_calls = list_calls(exporter)
    done = []

    def scraped_through_enough_refreshes() -> bool:
        during(get_checked(exporter))
        done.append(1)
        return len(done) >= scrapes and list_calls(exporter) - first_calls >= refreshes

    wait_until(scraped_through_enough_refreshes, 60, 0, "kubelet refreshes while scraping: the exporter stopped refreshing")


def healthy(exporter: ExporterProcess, pod: str) -> Optional[str]:
    """One scrape's text if all is well and samples belong to `pod`, for wait_until."""
    text = get_checked(exporter)
    return text if passes(lambda checked: assert_healthy(checked, pod), text) else None


def start_exporter_as(node: Node, args: List[str], unprivileged: bool = False) -> ExporterProcess:
    """The exporter process; `unprivileged`: unable to pass over file permissions (see _WITHOUT_DAC_OVERRIDE)."""
    full = ["--dcgm.url", node.dcgm.url, "--kubelet.socket", node.kubelet.socket_path,
            "--web.listen-address", "127.0.0.1:0"] + BASE_ARGS + args
    command = [sys.executable, "-c", _WITHOUT_DAC_OVERRIDE] if unprivileged and os.geteuid() == 0 else None
    return start_exporter(full, timeout_seconds=30, command=command)


# root connects to any socket whatever its mode (CAP_DAC_OVERRIDE). Rather than switching to another
# user, who may not reach this interpreter or the clone (root's home is 0700), the exporter keeps
# uid 0 without the two capabilities that pass over file permissions: the socket's mode then
# applies to it as to any owner, and everything it imports stays readable. Dropped from the
# bounding set, they stay dropped across the exec into the real `python -m exporter`.
_WITHOUT_DAC_OVERRIDE = """
import ctypes, os, sys
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2
libc = ctypes.CDLL(None, use_errno=True)
for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
    if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
        sys.exit(f"cannot drop capability {capability}: {os.strerror(ctypes.get_errno())}")
os.execv(sys.executable, [sys.executable, "-m", "exporter", *sys.argv[1:]])
"""


@pytest.fixture
def node(socket_dir):
    os.chmod(socket_dir, 0o755)  # traversable by any user, as /var/lib/kubelet/pod-resources is
    kubelet = FakeKubelet(str(socket_dir / "kubelet.sock"))
    kubelet.set_devices(BEFORE)
    with kubelet, FakeDcgmExporter(L4) as dcgm:
        state = Node(kubelet, dcgm, str(socket_dir))
        try:
            yield state
        finally:
            if state.exporter is not None:
                state.exporter.stop()


def passes(check: Callable[[str], None], text: str) -> bool:
    try:
        check(text)
    except AssertionError:
        return False
    return True


def run_fault(node: Node, fault: Fault, dependency: str, unprivileged: bool = False) -> None:
    """The script every case follows: healthy, faulty for a while, healthy again by itself."""
    exporter = node.exporter = start_exporter_as(node, fault.args, unprivileged)
    wait_until(lambda: healthy(exporter, "before"))
    fault.inject(node)
    wait_until(lambda: passes(fault.during, get_checked(exporter)))
    ride_out(exporter, fault.during)
    warnings = exporter.wait_for_lines("level=warn ", f"dependency={dependency}")
    assert len(warnings) == 1, "the fault must be logged once, not per scrape or refresh:\n" + "\n".join(warnings)
    assert f"reason={fault.reason}" in warnings[0], warnings[0]
    node.kubelet.set_devices(AFTER)
    fault.clear(node)
    wait_until(lambda: healthy(exporter, "after"))
    ride_out(exporter, lambda text: assert_healthy(text, "after"), refreshes=1)
    assert len(log_lines(exporter, "warn", dependency)) == 1
    recoveries = exporter.wait_for_lines("level=info ", f"dependency={dependency}")
    assert len(recoveries) == 1, "the recovery must be logged once:\n" + "\n".join(recoveries)


def assert_healthy(text: str, pod: str) -> None:
    assert gauge(text, "pod_gpu_exporter_dcgm_up") == "1" and gauge(text, "pod_gpu_exporter_kubelet_up") == "1"
    assert gauge(text, "pod_gpu_exporter_malformed_lines") == "0"
    assert attributed_to(text, pod)


# ---------------------------------------------------------------- kubelet faults


def kubelet_down(text: str) -> None:
    """Kubelet unreachable: GPU samples still served, attributed with the last good mapping."""
    assert gauge(text, "pod_gpu_exporter_kubelet_up") == "0"
    assert gauge(text, "pod_gpu_exporter_dcgm_up") == "1"
    assert attributed_to(text, "before")
    assert float(gauge(text, "pod_gpu_exporter_mapping_age_seconds")) >= 0


def kubelet_fault(name: Optional[str]) -> Callable[[Node], None]:
    def apply(node: Node) -> None:
        node.kubelet.fault = name
    return apply


KUBELET_FAULTS = {
    "kubelet-socket-absent": Fault(lambda n: n.kubelet.stop(), lambda n: n.kubelet.start(), "absent", kubelet_down),
    "kubelet-stale-socket-no-listener": Fault(lambda n: n.kubelet.die_leaving_socket(), lambda n: n.kubelet.start(),
                                              "unavailable", kubelet_down),
    "kubelet-hanging": Fault(kubelet_fault("hang"), kubelet_fault(None), "timeout", kubelet_down),
    "kubelet-unimplemented-both-versions": Fault(kubelet_fault("unimplemented"), kubelet_fault(None),
                                                 "unimplemented", kubelet_down),
    "kubelet-unknown": Fault(kubelet_fault("unknown"), kubelet_fault(None), "error", kubelet_down),
    "kubelet-rate-limited": Fault(kubelet_fault("rate_limited"), kubelet_fault(None), "rate_limited",
                                  kubelet_down),
}


@pytest.mark.parametrize("case", list(KUBELET_FAULTS))
def test_kubelet_fault(case, node):
    run_fault(node, KUBELET_FAULTS[case], "kubelet")


def test_kubelet_permission_denied(node):
    # The real socket is root's, mode 0755: only a process that passes over file permissions (root)
    # may connect. Here the exporter cannot pass over them (another user, or root without the
    # capability); mode 0555 shuts it out as owner too, and 0777 stands in for the fix.
    sock = node.kubelet.socket_path
    os.chmod(sock, 0o777)
    fault = Fault(lambda n: os.chmod(sock, 0o555), lambda n: os.chmod(sock, 0o777), "permission", kubelet_down)
    run_fault(node, fault, "kubelet", unprivileged=True)
    assert "permission denied" in log_lines(node.exporter, "warn", "kubelet")[0]


def test_kubelet_response_over_4mib_is_received(node):
    # A 5 MiB answer can take longer than BASE_ARGS' 0.5 s on a loaded machine: what is tested here
    # is the receive limit, not the timeout.
    exporter = node.exporter = start_exporter_as(node, ["--kubelet.timeout", "10s"])
    wait_until(lambda: healthy(exporter, "before"))
    node.kubelet.pad_bytes = 5 * MIB
    node.kubelet.set_devices(AFTER)
    wait_until(lambda: healthy(exporter, "after"))
    assert node.kubelet.last_response_bytes > 4 * MIB, "the premise: a List answer above gRPC's 4 MiB default"
    ride_out(exporter, lambda text: assert_healthy(text, "after"))
    assert "level=warn" not in exporter.stderr_text()


def test_kubelet_restart_with_new_mapping(node):
    exporter = node.exporter = start_exporter_as(node, [])
    wait_until(lambda: healthy(exporter, "before"))
    node.kubelet.stop()  # deletes the socket; the new kubelet creates a new one
    node.kubelet.set_devices(AFTER)
    node.kubelet.start()
    wait_until(lambda: healthy(exporter, "after"))
    ride_out(exporter, lambda text: assert_healthy(text, "after"))
    # A refresh may or may not have fallen into the gap; if it did, once, and its recovery once.
    warnings = log_lines(exporter, "warn", "kubelet")
    assert len(warnings) <= 1 and len(log_lines(exporter, "info", "kubelet")) == len(warnings)


# ---------------------------------------------------------------- dcgm-exporter faults


def dcgm_down(text: str) -> None:
    """No GPU series at all (never stale ones), but allocations and status are still served."""
    assert gauge(text, "pod_gpu_exporter_dcgm_up") == "0"
    assert gauge(text, "pod_gpu_exporter_kubelet_up") == "1"
    assert "DCGM_" not in text
    assert 'pod_gpu_allocation_info{namespace="ns",pod="before"' in text


def dcgm_served(malformed: Optional[int], samples: bool) -> Callable[[str], None]:
    """dcgm-exporter answered: `malformed` lines dropped (None: some), GPU samples attributed or none."""
    def check(text: str) -> None:
        assert gauge(text, "pod_gpu_exporter_dcgm_up") == "1"
        dropped = int(gauge(text, "pod_gpu_exporter_malformed_lines"))
        assert dropped == malformed if malformed is not None else dropped > 0
        assert attributed_to(text, "before") if samples else "DCGM_" not in "".join(sample_lines(text))
        heads = [line.rsplit(" ", 1)[0] for line in sample_lines(text)]
        assert len(heads) == len(set(heads)), "a series is repeated"
    return check


def dcgm_change(fault: Optional[str] = None, status: int = 200, body: Optional[Callable[[], bytes]] = None):
    def apply(node: Node) -> None:
        node.dcgm.body = body() if body else L4
        node.dcgm.status = status
        node.dcgm.fault = fault
    return apply


def fifty_mib() -> bytes:
    return L4 * (50 * MIB // len(L4) + 1)


def truncated_text() -> bytes:
    """dcgm-exporter's text cut inside a label value of a line half way through, served as complete."""
    text = L4.decode()
    return text[: text.index('UUID="GPU-', len(text) // 2) + len('UUID="GPU-c2f7')].encode()


def help_type_only() -> bytes:
    """What dcgm-exporter serves when it sees no GPU: every family described, no sample."""
    return b"".join(line for line in L4.splitlines(keepends=True) if line.startswith(b"#"))


DUPLICATED_FAMILY = "DCGM_FI_DEV_GPU_TEMP"


def duplicated_family() -> bytes:
    """One family's block (HELP, TYPE, samples) sent a second time at the end."""
    lines = L4.decode().splitlines()
    block = [line for line in lines if re.match(rf"(# (HELP|TYPE) )?{DUPLICATED_FAMILY}[ {{]", line)]
    assert len(block) >= 3
    return ("\n".join(lines + block) + "\n").encode()


def duplicated_samples() -> int:
    return sum(1 for line in duplicated_family().decode().splitlines() if line.startswith(DUPLICATED_FAMILY)) // 2


HEALTHY_DCGM = dcgm_change()
SLOW_ENOUGH_FOR_32MIB = ["--dcgm.timeout", "10s"]  # the cap, not the deadline, must stop these
DCGM_FAULTS = {
    "dcgm-refusing-connections": Fault(lambda n: n.dcgm.stop(), lambda n: n.dcgm.start(), "refused", dcgm_down),
    "dcgm-hanging-past-timeout": Fault(dcgm_change("hang"), HEALTHY_DCGM, "timeout", dcgm_down),
    "dcgm-http-500": Fault(dcgm_change(status=500), HEALTHY_DCGM, "status", dcgm_down),
    "dcgm-empty-body": Fault(dcgm_change("empty"), HEALTHY_DCGM, "empty", dcgm_down),
    "dcgm-50mib-body": Fault(dcgm_change(body=fifty_mib), HEALTHY_DCGM, "too_large", dcgm_down,
                             SLOW_ENOUGH_FOR_32MIB),
    "dcgm-50mib-body-without-content-length": Fault(dcgm_change("unsized", body=fifty_mib), HEALTHY_DCGM,
                                                    "too_large", dcgm_down, SLOW_ENOUGH_FOR_32MIB),
    "dcgm-binary-garbage": Fault(dcgm_change("garbage"), HEALTHY_DCGM, "malformed", dcgm_served(None, False)),
    "dcgm-connection-cut-mid-body": Fault(dcgm_change("truncate"), HEALTHY_DCGM, "truncated", dcgm_down),
    "dcgm-truncated-text": Fault(dcgm_change(body=truncated_text), HEALTHY_DCGM, "malformed",
                                 dcgm_served(1, True)),
    "dcgm-help-type-without-samples": Fault(dcgm_change(body=help_type_only), HEALTHY_DCGM, "no_gpu_samples",
                                            dcgm_served(0, False)),
    "dcgm-duplicate-family": Fault(dcgm_change(body=duplicated_family), HEALTHY_DCGM, "malformed",
                                   dcgm_served(duplicated_samples(), True)),
}


@pytest.mark.parametrize("case", list(DCGM_FAULTS))
def test_dcgm_fault(case, node):
    run_fault(node, DCGM_FAULTS[case], "dcgm-exporter")
