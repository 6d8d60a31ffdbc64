"""The line-level rewriter: samples byte-exact with owner labels appended, malformed lines dropped and counted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.core.mapping import EMPTY_MAPPING, build_mapping
from exporter.exposition.allocation import render_allocation_info
from exporter.collectors.catalogue import CATALOGUE
from exporter.exposition.families import TELEMETRY
from exporter.exposition.rewriter import Rewriter
from exporter.exposition.text import escape_label_value
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.devices import Device
from support.fixtures import FIXTURES_DIR, fixture_bytes

UUID0 = "GPU-be839661-c0f5-7452-284b-b875666df60c"  # H100 fixture: GPU 0 in MIG (GI 11, 13)
UUID1 = "GPU-21c6d9d7-46cd-7e91-99c3-7b6a06a3faea"
UUID2 = "GPU-5d9cc71f-b438-dc00-707d-c6c12bcfede1"
H100 = "dcgm/repo-fixture-h100-8gpu-mig-1g10gb-render-4.8.2-template.prom"
GOLDEN_DIR = FIXTURES_DIR / "golden"
UPSTREAM_OWNER_NAMES = ("namespace", "pod", "container", "pod_uid", "pod_name", "pod_namespace", "container_name")

BODY = (
    "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n"
    "# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
    f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{UUID0}",device="nvidia0",Hostname="n1"}} 41\n'
    f'DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="{UUID1}",device="nvidia1",Hostname="n1"}} 39\n'
    "# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).\n"
    "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
    f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",UUID="{UUID0}",device="nvidia0",Hostname="n1"}} 319159391\n'
    f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="1",UUID="{UUID1}",device="nvidia1",Hostname="n1"}} 4.55497156e+08\n'
)


def rewrite(body, devices=(), style="kubernetes"):
    mapping = build_mapping(DEVICE_FORMS, devices) if devices else EMPTY_MAPPING
    return Rewriter(mapping, style).rewrite(body.encode() if isinstance(body, str) else body)


def lines(result):
    text = result.text.decode()
    assert text.endswith("\n")
    return text[:-1].split("\n")


def nonblank(body: bytes):
    return [line for line in body.decode().split("\n") if line.strip()]


# --- pass-through ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES_DIR / "dcgm").glob("*.prom")) + ["legacy"])
def test_scrapes_without_owners_come_back_byte_exact_except_upstream_owner_labels(name):
    body = fixture_bytes("legacy/dcgm.prom" if name == "legacy" else f"dcgm/{name}")
    result = rewrite(body)
    assert result.malformed == 0
    expected = [_strip_upstream_owner_labels(line) for line in nonblank(body)]
    assert lines(result) == expected


def _strip_upstream_owner_labels(line: str) -> str:
    """The input line with owner label pairs cut out of its text, by position (independent of the rewriter)."""
    if line.startswith("#") or "{" not in line:
        return line
    head, labels, tail = line[: line.index("{") + 1], line[line.index("{") + 1 : line.rindex("}")], line[line.rindex("}") :]
    pairs = re.findall(r'([A-Za-z_][A-Za-z0-9_]*="(?:[^"\\]|\\.)*")', labels)
    kept = [pair for pair in pairs if pair.split("=", 1)[0] not in UPSTREAM_OWNER_NAMES]
    return head + ",".join(kept) + tail


def test_owner_labels_appended_in_kubernetes_style_order_kept():
    result = rewrite(BODY, [Device("team-a", "trainer-0", "pytorch", "nvidia.com/gpu", UUID1)])
    owner = ',namespace="team-a",pod="trainer-0",container="pytorch"'
    expected = BODY.splitlines()
    expected[3] = expected[3].replace('Hostname="n1"}', f'Hostname="n1"{owner}}}')
    expected[7] = expected[7].replace('Hostname="n1"}', f'Hostname="n1"{owner}}}')
    assert lines(result) == expected and result.malformed == 0


def test_owner_labels_appended_in_legacy_style():
    body = 'dcgm_gpu_temp{gpu="0",uuid="GPU-8f6b9d4e"} 40\ndcgm_gpu_temp{gpu="1",uuid="GPU-11111111"} 33\n'
    result = rewrite(body, [Device("default", "cuda-job", "cuda", "nvidia.com/gpu", "GPU-8f6b9d4e")], style="legacy")
    assert lines(result) == [
        'dcgm_gpu_temp{gpu="0",uuid="GPU-8f6b9d4e",pod_name="cuda-job",pod_namespace="default",container_name="cuda"} 40',
        'dcgm_gpu_temp{gpu="1",uuid="GPU-11111111"} 33',
    ]


def test_idle_gpu_samples_unchanged_and_no_empty_owner_labels():
    result = rewrite(BODY, [Device("team-a", "p", "c", "nvidia.com/gpu", UUID1)])
    gpu0 = [line for line in lines(result) if f'UUID="{UUID0}"' in line]
    assert gpu0 == [line for line in BODY.splitlines() if f'UUID="{UUID0}"' in line]
    assert '=""' not in result.text.decode()


def test_value_and_timestamp_text_kept_as_written():
    values = ["1", "-0.0", "16.365000", "4.55497156e+08", "9223372036854775794", "+Inf", "-Inf", "NaN",
              "1.5E-3", ".5", "7 1700000000000", "3\t1700000000000"]
    body = "".join(f'm{{gpu="0",UUID="{UUID0}",i="{i}"}} {value}\n' for i, value in enumerate(values))
    result = rewrite(body, [Device("n", "p", "c", "nvidia.com/gpu", "0")])
    assert result.malformed == 0
    assert [line.split("} ", 1)[1] for line in lines(result)] == values


def test_samples_without_labels_and_other_comments_pass():
    body = "# a free comment\nup 1\nprocess_start_time_seconds 1.7e9 1700000000\nempty{} 0\nm{gpu=\"0\",} 1\n"
    result = rewrite(body, [Device("n", "p", "c", "nvidia.com/gpu", "0")])
    assert lines(result) == ["# a free comment", "up 1", "process_start_time_seconds 1.7e9 1700000000", "empty{} 0",
                             'm{gpu="0",namespace="n",pod="p",container="c"} 1']


# --- shared GPUs and MIG -----------------------------------------------------------------------------

def test_shared_gpu_one_series_per_owner_sorted_replicas_collapsed():
    result = rewrite(BODY, [
        Device("team-b", "infer", "server", "nvidia.com/gpu.shared", UUID1 + "::1"),
        Device("team-a", "infer", "server", "nvidia.com/gpu.shared", UUID1 + "::0"),
        Device("team-a", "infer", "server", "nvidia.com/gpu.shared", UUID1 + "::3"),
    ])
    temps = [line for line in lines(result) if line.startswith("DCGM_FI_DEV_GPU_TEMP{") and 'gpu="1"' in line]
    assert temps == [
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="{UUID1}",device="nvidia1",Hostname="n1",'
        'namespace="team-a",pod="infer",container="server"} 39',
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="{UUID1}",device="nvidia1",Hostname="n1",'
        'namespace="team-b",pod="infer",container="server"} 39',
    ]
    assert len(lines(result)) == len(BODY.splitlines()) + 2  # each sample of GPU 1 once more, nothing else


def test_instances_of_one_gpu_go_to_their_own_pods_gpu_level_samples_to_none():
    result = rewrite(fixture_bytes(H100), [
        Device("ml", "small-a", "c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/11/0"),
        Device("ml", "small-b", "c", "nvidia.com/gpu", "nvidia0/gi13"),
    ])
    out = lines(result)
    assert all('pod="small-a"' in line for line in out if 'GPU_I_ID="11"' in line)
    assert all('pod="small-b"' in line for line in out if 'GPU_I_ID="13"' in line)
    assert all("pod=" not in line for line in out if "GPU_I_ID" not in line)


def test_golden_h100_node_with_several_forms():
    result = rewrite(fixture_bytes(H100), [
        Device("ml", "small-a", "c", "nvidia.com/mig-1g.10gb", f"MIG-{UUID0}/11/0"),
        Device("ml", "small-b", "c", "nvidia.com/gpu", "nvidia0/gi13"),
        Device("web", "infer-1", "vllm", "nvidia.com/gpu.shared", UUID1 + "::0"),
        Device("web", "infer-1", "vllm", "nvidia.com/gpu.shared", UUID1 + "::2"),
        Device("web", "infer-2", "vllm", "nvidia.com/gpu.shared", UUID1 + "::1"),
        Device("batch", "job", "main", "nvidia.com/gpu", "2"),
    ])
    assert result.malformed == 0
    _assert_golden("h100-several-forms.prom", result.text)


def _assert_golden(name: str, text: bytes):
    path = GOLDEN_DIR / name
    if os.environ.get("UPDATE_GOLDEN"):  # regenerate, then review the diff by hand before committing
        path.write_bytes(text)
    assert text == path.read_bytes(), f"differs from golden file {path}"


# --- upstream owner labels ---------------------------------------------------------------------------

@pytest.mark.parametrize("style, ours", [
    ("kubernetes", 'namespace="prod",pod="new",container="worker"'),
    ("legacy", 'pod_name="new",pod_namespace="prod",container_name="worker"'),
])
def test_upstream_owner_labels_empty_or_stale_replaced_never_duplicated(style, ours):
    body = (
        f'a{{gpu="0",UUID="{UUID0}",container="old",namespace="old-ns",pod="old-pod",pod_uid="1234"}} 1\n'
        f'b{{gpu="0",UUID="{UUID0}",pod_name="old",pod_namespace="old-ns",container_name="c",Hostname="h"}} 2\n'
        f'c{{gpu="1",UUID="{UUID1}",container="",namespace="",pod="",pod_uid=""}} 3\n'
        f'd{{pod="",gpu="1",namespace="",UUID="{UUID1}",container=""}} 4\n'
    )
    result = rewrite(body, [Device("prod", "new", "worker", "nvidia.com/gpu", UUID0)], style=style)
    assert lines(result) == [
        f'a{{gpu="0",UUID="{UUID0}",{ours}}} 1',
        f'b{{gpu="0",UUID="{UUID0}",Hostname="h",{ours}}} 2',
        f'c{{gpu="1",UUID="{UUID1}"}} 3',
        f'd{{gpu="1",UUID="{UUID1}"}} 4',
    ]


# --- malformed lines ---------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [
    f'DCGM_X{{gpu="0",UUID="{UUID0}}} 1',  # unterminated quote
    f'DCGM_X{{gpu="0",UUID="{UUID0}",err_msg="bad \\x escape"}} 1',
    f'DCGM_X{{gpu="0",UUID="{UUID0}"}} abc',  # not a number
    f'DCGM_X{{gpu="0",UUID="{UUID0}"}}',  # no value
    f'DCGM_X{{gpu="0",UUID="{UUID0}"}} 1 2 3',
    f'DCGM_X{{gpu="0",gpu="1",UUID="{UUID0}"}} 1',  # duplicate label name
    f'DCGM_X{{gpu="0" UUID="{UUID0}"}} 1',  # missing comma
    'DCGM_X{0gpu="0"} 1',  # bad label name
    '0DCGM_X{gpu="0"} 1',  # bad metric name
    "DCGM_X",
    "not a metric line at all",
    "# TYPE DCGM_X gaugeish",  # bad TYPE
    "# TYPE DCGM_X",
    "# HELP DCGM_X bad \\q escape",
])
def test_malformed_line_dropped_and_counted_rest_served(bad):
    body_lines = BODY.splitlines()
    result = rewrite("\n".join(body_lines[:3] + [bad] + body_lines[3:]) + "\n",
                     [Device("n", "p", "c", "nvidia.com/gpu", UUID0)])
    assert result.malformed == 1
    assert len(lines(result)) == len(body_lines)
    assert "DCGM_X" not in result.text.decode() and "not a metric" not in result.text.decode()


def test_invalid_utf8_line_dropped_and_counted():
    body = BODY.encode().replace(b'Hostname="n1"} 39', b'Hostname="n\xff\xfe1"} 39')
    result = Rewriter(EMPTY_MAPPING).rewrite(body)
    assert result.malformed == 1
    assert lines(result) == [line for line in BODY.splitlines() if not line.endswith("} 39")]
    result.text.decode("utf-8")  # what is served is always UTF-8


def test_duplicate_help_and_type_dropped_samples_kept():
    body = BODY + BODY.splitlines()[0] + "\n" + BODY.splitlines()[1] + "\n" + 'DCGM_FI_DEV_GPU_TEMP{gpu="7"} 50\n'
    result = rewrite(body)
    assert result.malformed == 0
    assert lines(result) == BODY.splitlines() + ['DCGM_FI_DEV_GPU_TEMP{gpu="7"} 50']


def test_a_first_type_line_after_its_samples_is_dropped_and_counted():
    body = 'DCGM_X{gpu="0"} 1\n# HELP DCGM_X help after samples is fine\n# TYPE DCGM_X gauge\n'
    result = rewrite(body)
    assert result.malformed == 1
    assert lines(result) == ['DCGM_X{gpu="0"} 1', "# HELP DCGM_X help after samples is fine"]


def test_our_own_metric_names_from_upstream_are_dropped_and_counted():
    # --dcgm.url pointed at another instance of this exporter: its status families would repeat ours.
    body = BODY + ("# HELP pod_gpu_exporter_dcgm_up x\n# TYPE pod_gpu_exporter_dcgm_up gauge\n"
                   "pod_gpu_exporter_dcgm_up 1\n"
                   'pod_gpu_allocation_info{namespace="a",pod="b",container="c",resource="r",device_id="0"} 1\n')
    result = rewrite(body)
    assert result.malformed == 4
    assert lines(result) == BODY.splitlines()


def test_every_family_the_exporter_writes_is_dropped_from_upstream():
    # Another instance in --sharing.mode process, or with the API: its share, health, XID and job rows
    # would repeat families this one writes after the samples, a second TYPE line client_golang refuses.
    written = [family for family in CATALOGUE if family.endpoint == TELEMETRY]
    body = BODY + "".join(f"# TYPE {family.name} {family.type}\n{family.name}{{UUID=\"{UUID0}\"}} 1\n"
                          for family in written)
    result = rewrite(body)
    assert result.malformed == 2 * len(written)
    assert lines(result) == BODY.splitlines()


# --- escaping ----------------------------------------------------------------------------------------

def test_owner_values_with_quote_backslash_newline_are_escaped():
    owner = ("ns", 'job "x"\\y\nz', "c\\")
    result = rewrite(BODY, [Device(*owner, "nvidia.com/gpu", UUID0)])
    assert 'pod="job \\"x\\"\\\\y\\nz",container="c\\\\"' in result.text.decode()
    samples = [s for f in text_string_to_metric_families(result.text.decode()) for s in f.samples
               if s.labels.get("UUID") == UUID0]
    assert samples and all((s.labels["namespace"], s.labels["pod"], s.labels["container"]) == owner for s in samples)


@given(st.text(max_size=30))
def test_escape_label_value_round_trips_through_a_parser(value):
    text = f'm{{v="{escape_label_value(value)}"}} 1\n'
    [family] = text_string_to_metric_families(text)
    assert family.samples[0].labels["v"] == value


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise_and_output_is_utf8(body):
    result = Rewriter(build_mapping(DEVICE_FORMS, [Device("n", "p", "c", "nvidia.com/gpu", "0")])).rewrite(body)
    text = result.text.decode("utf-8")
    assert result.malformed <= body.count(b"\n") + 1
    assert text == "" or text.endswith("\n")


_NAME = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_NAME, st.text(max_size=12)), max_size=5, unique_by=lambda pair: pair[0]),
       st.sampled_from(["0", "1"]))
def test_any_valid_label_set_comes_back_byte_exact(pairs, gpu):
    pairs = [(name, value) for name, value in pairs if name not in UPSTREAM_OWNER_NAMES + ("gpu",)]
    labels = ",".join([f'gpu="{gpu}"'] + [f'{name}="{escape_label_value(value)}"' for name, value in pairs])
    line = f"metric_x{{{labels}}} 1.5"
    result = rewrite(line + "\n", [Device("n", "p", "c", "nvidia.com/gpu", "1")])
    owner = ',namespace="n",pod="p",container="c"'
    assert lines(result) == [line.replace("} 1.5", owner + "} 1.5") if gpu == "1" else line]


# --- the allocation series ---------------------------------------------------------------------------

def test_allocation_info_fills_identity_from_the_samples():
    devices = [
        Device("batch", "job", "main", "nvidia.com/gpu", "2"),  # index strategy: UUID comes from samples
        Device("ml", "small-b", "c", "nvidia.com/gpu", "nvidia0/gi13"),
        Device("ml", "tiny", "c", "nvidia.com/mig-1g.10gb", "MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"),
        Device("gone", "p", "c", "nvidia.com/gpu", "GPU-not-on-this-node"),
    ]
    mapping = build_mapping(DEVICE_FORMS, devices)
    result = Rewriter(mapping).rewrite(fixture_bytes(H100))
    info = render_allocation_info(mapping, result.identities, "kubernetes").splitlines()
    assert info[:2] == [
        "# HELP pod_gpu_allocation_info A GPU device the kubelet reports as allocated to a container (1 per device).",
        "# TYPE pod_gpu_allocation_info gauge",
    ]
    assert info[2:6] == [
        'pod_gpu_allocation_info{namespace="batch",pod="job",container="main",resource="nvidia.com/gpu",'
        f'device_id="2",UUID="{UUID2}",gpu="2"}} 1',
        # No sample carries it: the UUID its device ID gives, as its health rows name it.
        'pod_gpu_allocation_info{namespace="gone",pod="p",container="c",resource="nvidia.com/gpu",'
        'device_id="GPU-not-on-this-node",UUID="GPU-not-on-this-node"} 1',
        'pod_gpu_allocation_info{namespace="ml",pod="small-b",container="c",resource="nvidia.com/gpu",'
        f'device_id="nvidia0/gi13",UUID="{UUID0}",gpu="0",GPU_I_ID="13"}} 1',
        'pod_gpu_allocation_info{namespace="ml",pod="tiny",container="c",resource="nvidia.com/mig-1g.10gb",'
        'device_id="MIG-3a9c2f4e-1b2c-5d6e-8f90-123456789abc"} 1',  # unresolved without NVML: no name at all
    ]


def test_allocation_info_in_legacy_style_and_empty_without_allocations():
    mapping = build_mapping(DEVICE_FORMS, [Device("default", "cuda-job", "cuda", "nvidia.com/gpu", "0")])
    info = render_allocation_info(mapping, frozenset(), "legacy").splitlines()
    assert info[2] == ('pod_gpu_allocation_info{pod_name="cuda-job",pod_namespace="default",container_name="cuda",'
                       'resource="nvidia.com/gpu",device_id="0",gpu="0"} 1')  # no samples: the index it gives
    assert render_allocation_info(EMPTY_MAPPING, frozenset(), "kubernetes") == ""


# --- repeated series ---------------------------------------------------------------------------------

def test_upstream_copies_per_pod_become_one_series_not_duplicates():
    # dcgm-exporter -k with virtual GPUs copies each sample once per pod; with its owner labels replaced
    # by ours the copies would be one series several times, which Prometheus rejects.
    body = (f'm{{gpu="0",UUID="{UUID0}",pod="a",namespace="n",container="c"}} 1\n'
            f'm{{gpu="0",UUID="{UUID0}",pod="b",namespace="n",container="c"}} 1\n'
            f'm{{gpu="1",UUID="{UUID1}",pod="",namespace="",container=""}} 2\n'
            f'm{{gpu="1",UUID="{UUID1}",pod="x",namespace="y",container="z"}} 2\n')
    result = rewrite(body, [
        Device("n", "a", "c", "nvidia.com/gpu.shared", UUID0 + "::0"),
        Device("n", "b", "c", "nvidia.com/gpu.shared", UUID0 + "::1"),
    ])
    assert lines(result) == [
        f'm{{gpu="0",UUID="{UUID0}",namespace="n",pod="a",container="c"}} 1',
        f'm{{gpu="0",UUID="{UUID0}",namespace="n",pod="b",container="c"}} 1',
        f'm{{gpu="1",UUID="{UUID1}"}} 2',
    ]
    assert result.malformed == 0


def test_a_repeated_identical_sample_is_dropped_and_counted():
    line = BODY.splitlines()[2]
    result = rewrite(BODY + line + "\n")
    assert lines(result) == BODY.splitlines() and result.malformed == 1


@pytest.mark.parametrize("line, expected", [
    ("DCGM_X{ } 1", "DCGM_X{} 1"),
    (f'DCGM_X {{UUID="{UUID0}"}} 1', f'DCGM_X{{UUID="{UUID0}",namespace="n",pod="p",container="c"}} 1'),
    (f'  DCGM_X{{UUID="{UUID0}"}} 1', f'DCGM_X{{UUID="{UUID0}",namespace="n",pod="p",container="c"}} 1'),
    (f'DCGM_X{{UUID="{UUID0}"}} 1 1700000000000', f'DCGM_X{{UUID="{UUID0}",namespace="n",pod="p",container="c"}} 1 1700000000000'),
])
def test_unusual_but_valid_text_is_kept_not_counted_as_malformed(line, expected):
    # promtool parses each of these; dropping them would lose data.
    result = rewrite(line + "\n", [Device("n", "p", "c", "nvidia.com/gpu", UUID0)])
    assert result.malformed == 0
    assert lines(result) == [expected]


def test_new_values_for_the_same_series_are_refilled_into_the_last_rewrite():
    mapping = build_mapping(DEVICE_FORMS, [Device("ns", "p", "c", "nvidia.com/gpu", "0")])
    rewriter = Rewriter(mapping)
    body = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-x\"} {}\n"
    first = rewriter.rewrite(body.replace("{}", "5").encode())
    second = rewriter.rewrite(body.replace("{}", "7.5e+01").encode())
    assert rewriter.refills == 1
    assert second.text == first.text.replace(b"} 5\n", b"} 7.5e+01\n")
    assert second == Rewriter(mapping).rewrite(body.replace("{}", "7.5e+01").encode())


@pytest.mark.parametrize("before, after", [
    ('X{gpu="0"} 1 1700000000000', 'X{gpu="0"} 1 1.5'),  # a timestamp is not a value
    ('X{gpu="0"}\t1', 'X{gpu="0"}\t2'),  # no space before the value
    ('X{gpu="0"} 1', 'X{gpu="0"} '),  # the value gone
    ('X{gpu="0"} 1', 'X{gpu="0"} 1_000'),  # Python reads it, Prometheus does not
    ('# HELP X some help', '# HELP X some \\q'),  # a comment is compared whole
])
def test_bodies_the_template_must_not_refill_take_the_line_by_line_way(before, after):
    mapping = build_mapping(DEVICE_FORMS, [Device("ns", "p", "c", "nvidia.com/gpu", "0")])
    rewriter = Rewriter(mapping)
    rewriter.rewrite((before + "\n").encode())
    result = rewriter.rewrite((after + "\n").encode())
    assert rewriter.refills == 0
    assert result == Rewriter(mapping).rewrite((after + "\n").encode())


@pytest.mark.parametrize("owner_container, label", [("c\x00", "a"), ("c", "a\x00")])
def test_nul_bytes_in_owner_names_and_labels_are_refilled_like_any_text(owner_container, label):
    """An earlier template marked each value's place with a NUL byte and had to refuse bodies and
    owners that held one; the template now keeps fixed text and gaps apart, so they refill too."""
    mapping = build_mapping(DEVICE_FORMS, [Device("ns", "p", owner_container, "nvidia.com/gpu", "0")])
    rewriter = Rewriter(mapping)
    rewriter.rewrite(b'X{gpu="0",l="%s"} 1\n' % label.encode())
    result = rewriter.rewrite(b'X{gpu="0",l="%s"} 2\n' % label.encode())
    assert rewriter.refills == 1
    assert result == Rewriter(mapping).rewrite(b'X{gpu="0",l="%s"} 2\n' % label.encode())
    assert result.text.endswith(b'container="%s"} 2\n' % owner_container.encode())


def test_one_bad_value_after_thousands_of_integers_is_checked_in_linear_time():
    """The template's value check once backtracked exponentially over runs of integers: this case
    did not finish. Run apart, so that a regression fails after a minute instead of hanging."""
    code = (
        "from exporter.core.mapping import EMPTY_MAPPING\n"
        "from exporter.exposition.rewriter import Rewriter\n"
        "lines = [b'X{gpu=\"%d\"} 1000' % i for i in range(5000)]\n"
        "rewriter = Rewriter(EMPTY_MAPPING)\n"
        "rewriter.rewrite(b'\\n'.join(lines) + b'\\n')\n"
        "result = rewriter.rewrite(b'\\n'.join(lines[:-1] + [b'X{gpu=\"4999\"} 1000)']) + b'\\n')\n"
        "print(result.malformed, rewriter.refills)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.split() == ["1", "0"], done.stderr


@pytest.mark.parametrize("comment", ["# HELP", "# TYPE", "#  HELP", "# TYPE\t"])
def test_a_bare_help_or_type_word_is_dropped_not_passed_on(comment):
    """Found by the damaged-text property on prometheus_client 0.17, whose parser fails on it."""
    result = rewrite(comment + "\n# other comment\n", [])
    assert result.malformed == 1
    assert lines(result) == ["# other comment"]
