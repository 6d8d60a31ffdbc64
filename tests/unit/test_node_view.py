"""The node page's view, built from the mapping, the scraper's last answer and the shares, never by a fetch."""

from __future__ import annotations

import dataclasses

from exporter.base.errors import KubeletError
from exporter.core.attribution import Attribution, Snapshot
from exporter.core.health import DeviceHealth, DeviceTaint
from exporter.core.identity import GpuIdentity, GpuKey, Owner
from exporter.core.mapping import build_mapping
from exporter.exposition.allocation import AllocationSection
from exporter.exposition.device_figures import read_device_figures
from exporter.vendors.nvidia import NVIDIA
from exporter.exposition.sections import StatusSection
from exporter.vendors.nvidia.shares.compute import DeviceShares, HolderShare, Remainder, Shares, UnallocatedShare
from exporter.vendors.nvidia.collectors.process_shares import shares_page_part
from exporter.collectors.registry import Registry
from exporter.vendors.nvidia.collectors.xid_events import lost_page_part
from exporter.config import parse_config
from exporter.exposition.label_limit import LabelLimit
from exporter.sources.kubelet import AllocatedDevice
from exporter.web.node_view import NodeInputs, build_node_view
from exporter.web.page_parts import AFTER_GPUS, WITH_UNHELD
from exporter.web.scrape import Scraper
from exporter.web.service import App
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from exporter.vendors.nvidia.figures import DCGM_FIGURES

A, B, C = ("GPU-aaaaaaaa-0000-0000-0000-00000000000a", "GPU-bbbbbbbb-0000-0000-0000-00000000000b",
           "GPU-cccccccc-0000-0000-0000-00000000000c")
LABELS = 'gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="node-7"'


def _body() -> bytes:
    lines = []
    for gpu, uuid, util, used, watts in (("0", A, 40, 1024, 210.5), ("1", B, 90, 40960, 650.0)):
        labels = LABELS.format(gpu=gpu, uuid=uuid)
        lines += [f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}", f"DCGM_FI_DEV_FB_USED{{{labels}}} {used}",
                  f"DCGM_FI_DEV_FB_FREE{{{labels}}} {81559 - used}", f"DCGM_FI_DEV_FB_RESERVED{{{labels}}} 0",
                  f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {watts}", f"DCGM_FI_DEV_SM_CLOCK{{{labels}}} 1980"]
    return ("\n".join(lines) + "\n").encode()


def _mapping():
    devices = [AllocatedDevice("inference", "llm-a", "vllm", "nvidia.com/gpu.shared", f"{A}::0"),
               AllocatedDevice("inference", "llm-a", "vllm", "nvidia.com/gpu.shared", f"{A}::1"),
               AllocatedDevice("inference", "llm-b", "vllm", "nvidia.com/gpu.shared", f"{A}::2"),
               AllocatedDevice("ml", "trainer", "pytorch", "nvidia.com/gpu", B)]
    mapping = build_mapping(DEVICE_FORMS, devices, offered={("nvidia.com/gpu.shared", A): 4})
    health = DeviceHealth({GpuKey("UUID", B, ""): "unhealthy", GpuKey("UUID", A, ""): "healthy"},
                          (DeviceTaint(GpuKey("UUID", C, ""), "gpu.nvidia.com/unmonitored", "", "None"),))
    return dataclasses.replace(mapping, device_health=health)


def _inputs(body=None, shares=None, lost=frozenset()) -> NodeInputs:
    """The page's inputs, with the shares and the lost GPUs as their collectors hand them to the page."""
    parts = ((("process_shares", shares_page_part(shares)),) if shares else ()) + (
        (("xid_events", lost_page_part(lost)),) if lost else ())
    return NodeInputs(Snapshot(_mapping(), True, 1.0), body is not None, read_device_figures(body, DCGM_FIGURES) if body else {},
                      parts)


def test_gpus_carry_their_model_figures_holders_health_and_taints():
    view = build_node_view(_inputs(_body()))
    assert view.node == "node-7" and view.figures_note == ""
    shared, whole, tainted = view.gpus
    assert (shared.index, shared.uuid, shared.model, shared.health) == ("0", A, "NVIDIA H100 80GB HBM3", "healthy")
    # Two replicas of four, then one: each holder's share of the GPU; no own figures on a shared device.
    assert [(h.pod, h.share, h.memory_bytes, h.sm_ratio, h.power_watts) for h in shared.holders] == [
        ("llm-a", 0.5, None, None, None), ("llm-b", 0.25, None, None, None)]
    assert (shared.utilization_ratio, shared.memory_used_bytes, shared.power_watts) == (0.4, 1024 * 2**20, 210.5)
    assert shared.memory_total_bytes == 81559 * 2**20
    # A GPU one container holds whole: the device's figures are its holder's.
    assert whole.health == "unhealthy"
    assert [(h.pod, h.share, h.memory_bytes, h.sm_ratio, h.power_watts) for h in whole.holders] == [
        ("trainer", 1.0, 40960 * 2**20, 0.9, 650.0)]
    # A device no sample names, known by its DRA taint alone, still has its row: held by nobody.
    assert (tainted.uuid, tainted.holders, tainted.taints) == (C, (), ("gpu.nvidia.com/unmonitored:None",))


def test_before_any_scrape_the_held_gpus_are_shown_by_their_keys_and_the_figures_said_missing():
    view = build_node_view(_inputs())
    assert view.figures_note.startswith("no scrape yet")
    assert [gpu.uuid for gpu in view.gpus] == [A, B, C]
    assert [gpu.model for gpu in view.gpus] == ["", "", ""]
    assert [len(gpu.holders) for gpu in view.gpus] == [2, 1, 0]


def test_process_mode_gives_each_holder_its_own_use_and_names_use_without_holding():
    device = GpuIdentity(A, "0", "nvidia0", "")
    other = GpuIdentity(B, "1", "nvidia1", "")
    shares = Shares((
        DeviceShares(device, (HolderShare(device, Owner("inference", "llm-a", "vllm"), 5 * 2**30, 3500, 2),
                              HolderShare(device, Owner("inference", "llm-b", "vllm"), 0, 0, 0)),
                     (Remainder(device, "host", 0, 0, 0),)),
        DeviceShares(other, (HolderShare(other, Owner("ml", "trainer", "pytorch"), 2**30, 7000, 1),), (),
                     unallocated=(UnallocatedShare(other, Owner("research", "notebook-7", "jupyter"), 2**29, 300, 1),)),
    ))
    view = build_node_view(_inputs(_body(), shares))
    shared, whole, _ = view.gpus
    assert [(h.pod, dict(h.figures)) for h in shared.holders] == [
        ("llm-a", {"memory": "5.0 GiB", "SM": "35 %"}), ("llm-b", {"memory": "0.0 GiB", "SM": "0 %"})]
    # Measured, its own memory and SM stand where the device's would; the power is still the device's.
    assert [(dict(h.figures), h.power_watts) for h in whole.holders] == [({"memory": "1.0 GiB", "SM": "70 %"}, 650.0)]
    assert (view.columns, view.holder_columns) == ((), ())  # both fill the table's own columns
    ((place, block),) = view.blocks
    assert place == WITH_UNHELD and block.startswith("<h3>Used without being held</h3>")
    assert "<tr><td>1</td><td>research/<b>notebook-7</b>/jupyter</td><td>0.5 GiB</td><td>3 %</td></tr>" in block


def test_a_lost_gpu_is_marked_on_its_row_and_one_nvml_names_alone_gets_one():
    gone = GpuIdentity(C, "3", "", "")
    view = build_node_view(_inputs(_body(), lost=frozenset({gone})))
    lost = [gpu for gpu in view.gpus if gpu.lost]
    assert [(gpu.index, gpu.uuid, gpu.taints) for gpu in lost] == [("3", C, ("gpu.nvidia.com/unmonitored:None",))]
    assert len(view.gpus) == 3  # the tainted key and NVML's GPU are one device
    assert view.blocks == ((AFTER_GPUS, f'<section><h2>Lost GPUs</h2><ul class="lost"><li><b>GPU 3</b> {C}: NVML '
                                        "reports it lost (fallen off the bus or unreachable)</li></ul></section>"),)


class _Kubelet:
    def __init__(self, devices):
        self.devices, self.error = list(devices), None

    def list_devices(self):
        if self.error:
            raise KubeletError(self.error, reason="absent")
        return list(self.devices)


def _app(path, kubelet: _Kubelet, sections=()) -> App:
    """The real App over the real registry of a --dcgm.file run, its kubelet answering in-process."""
    config = parse_config(["--dcgm.file", str(path), "--kubernetes.api", "off"], {})
    registry = Registry(config)
    hub = registry.prepare()
    attribution = Attribution(kubelet.list_devices, DEVICE_FORMS, refresh_interval_seconds=60, max_age_seconds=600)
    attribution.refresh()
    registry.build(attribution, LabelLimit(None))
    scraper = Scraper(hub.upstream, attribution, "kubernetes", [*sections, StatusSection(NVIDIA.status)])
    return App(scraper, attribution, "/gpu/metrics", collectors=registry)


def test_the_page_reads_the_scrapers_last_answer_and_never_fetches(tmp_path):
    path = tmp_path / "dcgm.prom"
    path.write_bytes(_body())
    kubelet = _Kubelet([AllocatedDevice("ml", "trainer", "pytorch", "nvidia.com/gpu", B)])
    app = _app(path, kubelet, [AllocationSection("kubernetes", None, lambda: True, DCGM_FIGURES)])
    before = app.index_page().decode()
    assert "no scrape yet" in before and "NVIDIA H100" not in before
    path.unlink()  # a page view that read the file now would find none
    assert "no scrape yet" in app.index_page().decode()
    path.write_bytes(_body())
    app.scraper.scrape()
    after = app.index_page().decode()
    assert "NVIDIA H100 80GB HBM3" in after and "GPUs of node-7" in after and "trainer" in after
    assert app.scraper.scrapes == 1  # the views made none


def test_the_sources_table_is_the_apps_source_states_and_names_the_flags_of_those_off(tmp_path):
    path = tmp_path / "dcgm.prom"
    path.write_bytes(_body())
    app = _app(path, _Kubelet([]))
    app.scraper.scrape()
    html = app.index_page().decode()
    names = [state.name for state in app.source_states()]
    assert names == ["kubelet", "dcgm", "kubernetes", "process_shares", "xid_events", "hpc_jobs"]
    for name in ("kubelet", "dcgm"):
        assert f'<th scope="row">{name}</th><td class="up">up</td>' in html
    assert ("Not in use: kubernetes (turned on by --kubernetes.api); process_shares (turned on by --sharing.mode "
            "process); xid_events (turned on by --health.xid-events on); hpc_jobs (turned on by "
            "--hpc.job-mapping-dir).") in html


def test_a_failing_kubelet_and_dcgm_exporter_are_shown_down_with_their_errors(tmp_path):
    path = tmp_path / "dcgm.prom"
    path.write_bytes(_body())
    kubelet = _Kubelet([])
    app = _app(path, kubelet)
    app.scraper.scrape()
    kubelet.error = "kubelet socket /run/kubelet.sock not found: is the pod-resources folder mounted?"
    app.attribution.refresh()
    path.unlink()
    app.scraper.scrape()
    html = app.index_page().decode()
    assert "kubelet socket /run/kubelet.sock not found: is the pod-resources folder mounted?" in html
    assert f"dcgm textfile {path} does not exist" in html
    assert html.count('class="down">down<') == 2
    assert "NVIDIA H100 80GB HBM3" in html  # the last answer's figures stay, its source marked down


def test_the_page_is_titled_by_dcgm_exporter_4s_lower_case_hostname_label_too(tmp_path):
    """dcgm-exporter 4.x writes `hostname`, not `Hostname`: the title names the node all the same."""
    path = tmp_path / "dcgm.prom"
    path.write_bytes(_body().replace(b'Hostname="', b'hostname="'))
    app = _app(path, _Kubelet([]))
    app.scraper.scrape()
    assert "GPUs of node-7" in app.index_page().decode()
