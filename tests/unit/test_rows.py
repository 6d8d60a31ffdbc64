"""The one writer of the exporter's own rows (exposition.rows): label names and order from the entry, the
header only with a row; and every writer of a family goes through it, its rows true to the entry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.core.health import DeviceHealth, DeviceTaint
from exporter.core.identity import GpuKey
from exporter.core.mapping import Mapping
from exporter.collectors.catalogue import CATALOGUE
from exporter.collectors.hpc_jobs import families as hpc_families
from exporter.collectors.kubernetes import families as kubernetes_families
from exporter.exposition import families
from exporter.vendors.nvidia import families as nvidia_families
from exporter.collectors.kubernetes.health_section import render_device_health
from exporter.exposition.rows import label_text, render_family

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "exporter"
_ROW = re.compile(r"^([a-z_]+)\{(.*)\} \S+$", re.MULTILINE)
_NAME = re.compile(r'([A-Za-z_]+)="')


def test_labels_are_written_in_the_entrys_order_whatever_the_callers():
    text = label_text(nvidia_families.CONTAINER_XID_ERRORS, {"xid": "79", "gpu": "0", "UUID": "GPU-1"}, 'namespace="a"')
    assert text == 'UUID="GPU-1",gpu="0",namespace="a",xid="79"'
    assert label_text(kubernetes_families.DEVICE_TAINT, {"gpu": "1", "key": "k", "value": "", "effect": "None"}) == \
        'gpu="1",key="k",value="",effect="None"'  # a required label is written even empty; an absent optional not


def test_a_label_the_entry_does_not_declare_or_a_required_one_missing_is_refused():
    with pytest.raises(ValueError, match="has no label"):
        label_text(hpc_families.HPC_JOB_INFO, {"gpu": "0", "hpc_job": "1", "job": "1"})
    with pytest.raises(ValueError, match="needs label hpc_job"):
        label_text(hpc_families.HPC_JOB_INFO, {"gpu": "0"})


def test_a_family_without_rows_is_not_written_at_all():
    assert render_family(hpc_families.HPC_JOB_INFO, ()) == ""
    assert render_family(nvidia_families.DEVICE_LOST, [('gpu="1"', 1)]) == \
        nvidia_families.DEVICE_LOST.header + 'pod_gpu_device_lost{gpu="1"} 1\n'


def test_a_device_no_sample_named_has_health_and_taint_rows_true_to_their_entries():
    # Named by its index alone (dcgm-exporter down): the catalogue required both UUID and gpu, which such a
    # row never had; now the rows and the entries agree.
    key = GpuKey("gpu", "3", "")
    mapping = Mapping(device_health=DeviceHealth({key: "healthy"}, (DeviceTaint(key, "drain", "", "NoSchedule"),)))
    text = render_device_health(mapping, frozenset())
    by_name = {family.name: family for family in CATALOGUE}
    rows = _ROW.findall(text)
    assert len(rows) == 2
    for name, labels in rows:
        written = tuple(_NAME.findall(labels))
        family = by_name[name]
        assert set(family.labels) <= set(written) <= set(family.label_order), (name, written)
        assert written == tuple(label for label in family.label_order if label in written)


def test_outside_the_exposition_package_no_module_writes_a_header_or_a_rows_label_names():
    header = re.compile(r"(?<!--prometheus)\.header\b|# (HELP|TYPE) ")  # top's --prometheus.header is a flag
    row_labels = re.compile(r"""f?['"][a-zA-Z_]+=\\?"\{""")  # a label written by hand: f'xid="{…}"'
    found = [str(path.relative_to(PACKAGE_ROOT)) for path in sorted(PACKAGE_ROOT.rglob("*.py"))
             if path.parent.name not in ("exposition", "_gen", "demo") and path.name != "mapping_report.py"
             # a vendor's demo modules simulate its upstream exporter's text, as the demo package does
             and not (path.parts[-3:-2] == ("vendors",) and path.name.startswith("demo_"))
             and (header.search(path.read_text()) or row_labels.search(path.read_text()))]
    assert found == []
