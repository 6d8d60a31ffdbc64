"""Pure: --labels.* parsing, kube-state-metrics sanitising, the contract's order, escaping, collisions."""

from __future__ import annotations

import dataclasses
import re

import pytest

from exporter.core.identity import Owner
from exporter.core.mapping import build_mapping
from exporter.exposition.allocation import render_allocation_info
from exporter.exposition.rewriter import Rewriter
from exporter.exposition.text import render_label_pairs
from exporter.sources.kubelet import AllocatedDevice
from exporter.collectors.kubernetes.labels import (
    LabelSpec,
    PodInfo,
    allowed_items,
    compile_key_pattern,
    extra_choices,
    extra_label_pairs,
    sanitise_label_name,
)
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS

UUID = "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


def pod(labels=(), annotations=(), controller=None):
    return PodInfo("1f0e-uid", tuple(sorted(labels)), tuple(sorted(annotations)), controller, ())


@pytest.mark.parametrize("key, name", [
    ("app.kubernetes.io/name", "app_kubernetes_io_name"),
    ("team", "team"),
    ("example.com/cost-center", "example_com_cost_center"),
    ("ÄÖ-ü", "____"),  # one _ per character, as KSM does
    ("123", "123"),  # fine after the label_ prefix
])
def test_sanitised_like_kube_state_metrics(key, name):
    assert sanitise_label_name(key) == name


def test_extra_choices():
    assert extra_choices("pod_uid,workload,queue") == {"pod_uid", "workload", "queue"}
    assert extra_choices(" workload ") == {"workload"}
    assert extra_choices("") == frozenset()
    with pytest.raises(ValueError, match="unknown extra label 'uid'"):
        extra_choices("pod_uid,uid")


def test_key_patterns_match_whole_keys():
    pattern = compile_key_pattern("team|app")
    items = {"team": "a", "teams": "b", "app": "c", "my-app": "d"}
    assert allowed_items(items, pattern) == (("app", "c"), ("team", "a"))
    assert allowed_items(items, None) == ()
    with pytest.raises(ValueError, match="invalid regular expression"):
        compile_key_pattern("(")


def test_order_escaping_and_collisions():
    spec = LabelSpec(pod_uid=True, workload=True, pod_labels=re.compile(".*"), pod_annotations=re.compile(".*"))
    info = pod(labels=[("z", "1"), ("a.b", "dot"), ("a_b", "underscore"), ("app", 'say "hi"\\\n')],
               annotations=[("note", "x")])
    pairs = extra_label_pairs(spec, info, ("Deployment", "web"))
    assert pairs[3:5] == (("label_a_b", "dot"), ("label_app", 'say "hi"\\\n'))  # unescaped: the source writes no text
    text = "," + render_label_pairs(pairs)  # escaped by the exposition's one escape
    assert text == (',pod_uid="1f0e-uid",workload_kind="Deployment",workload="web",label_a_b="dot",'
                    'label_app="say \\"hi\\"\\\\\\n",label_z="1",annotation_note="x"')


def test_unknown_workload_leaves_out_both_workload_labels():
    spec = LabelSpec(pod_uid=True, workload=True)
    assert extra_label_pairs(spec, pod(), None) == (("pod_uid", "1f0e-uid"),)


def test_extras_follow_the_owner_labels_on_samples_and_allocation_info():
    devices = [AllocatedDevice("ml", "trainer-0", "main", "nvidia.com/gpu", UUID),
               AllocatedDevice("ml", "other", "main", "nvidia.com/gpu", "GPU-unseen")]
    mapping = build_mapping(DEVICE_FORMS, devices)
    mapping = dataclasses.replace(mapping, extra_labels={("ml", "trainer-0"): (("pod_uid", "u1"), ("label_team", "a"))})
    body = f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{UUID}"}} 7\nDCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-idle"}} 0\n'
    result = Rewriter(mapping, "legacy").rewrite(body.encode())
    assert result.text.decode().splitlines() == [
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="{UUID}",pod_name="trainer-0",pod_namespace="ml",'
        'container_name="main",pod_uid="u1",label_team="a"} 7',
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-idle"} 0',  # unattributed: never extras
    ]
    info = render_allocation_info(mapping, result.identities, "kubernetes").splitlines()[2:]
    assert info[0].startswith('pod_gpu_allocation_info{namespace="ml",pod="other",container="main",resource=')
    assert info[1].startswith('pod_gpu_allocation_info{namespace="ml",pod="trainer-0",container="main",'
                              'pod_uid="u1",label_team="a",resource="nvidia.com/gpu"')
    assert Owner("ml", "trainer-0", "main") in mapping.owners_for(next(iter(mapping.owners)))
