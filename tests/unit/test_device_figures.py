"""Each device's model and figures, read from a dcgm-exporter answer as the exposition grammar reads it."""

from __future__ import annotations

from exporter.core.identity import GpuIdentity
from exporter.exposition.device_figures import read_device_figures
from exporter.vendors.nvidia.figures import DCGM_FIGURES
from support.fixtures import fixture_bytes

L4_UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


def test_a_real_l4_scrape_gives_its_model_host_and_figures():
    (identity, figures), = read_device_figures(fixture_bytes("dcgm/l4-aws-gpu-operator-default-counters.prom"), DCGM_FIGURES).items()
    assert identity == GpuIdentity(L4_UUID, "0", "nvidia0", "")
    assert (figures.model, figures.hostname) == ("NVIDIA L4", "i-030791dc5a37cd257")
    assert figures.power_watts == 16.365 and figures.utilization_percent == 0.0
    assert figures.memory_free_mib == 22563 and figures.memory_total_mib > figures.memory_free_mib


def test_mig_instances_escaped_labels_and_unusable_values():
    body = (b'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-1",GPU_I_ID="2",modelName="A100 \\"SXM\\""} 0.25\n'
            b'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-1",modelName="A100"} NaN\n'
            b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",gpu="1"} 5\n'  # a label twice: refused by the grammar
            b'DCGM_FI_DEV_GPU_UTILX{gpu="0",UUID="GPU-1"} 7\n'
            b'DCGM_FI_DEV_GPU_UTIL{Hostname="h"} 9\n')  # names no device
    figures = read_device_figures(body, DCGM_FIGURES)
    assert set(figures) == {GpuIdentity("GPU-1", "0", "", "2"), GpuIdentity("GPU-1", "0", "", "")}
    instance = figures[GpuIdentity("GPU-1", "0", "", "2")]
    assert (instance.model, instance.engine_active_ratio) == ('A100 "SXM"', 0.25)
    whole = figures[GpuIdentity("GPU-1", "0", "", "")]
    assert (whole.model, whole.power_watts, whole.utilization_percent, whole.memory_total_mib) == ("A100", None, None, None)


def test_the_node_name_is_read_from_either_spelling_of_the_hostname_label():
    """dcgm-exporter 4.x renamed Hostname to hostname: the node page's title reads either, as attribution does."""
    for spelling in ("Hostname", "hostname"):
        body = f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",{spelling}="node-7"}} 5\n'.encode()
        (figures,) = read_device_figures(body, DCGM_FIGURES).values()
        assert figures.hostname == "node-7", spelling
