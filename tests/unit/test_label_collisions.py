"""No sample carries a label name twice, whatever upstream sends: every name the exporter adds replaces
an upstream label of that name; checked over generated upstream label sets with the real parsers."""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.core.mapping import build_mapping
from exporter.exposition import families
from exporter.exposition.allocation import render_allocation_info
from exporter.exposition.labels import LABEL_STYLES, UPSTREAM_OWNER_LABELS
from exporter.exposition.rewriter import Rewriter
from exporter.exposition.series import SeriesBuilder
from exporter.exposition.streamed import rewrite_streamed
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from support.exposition_strategies import SETTINGS, UUIDS, assert_no_duplicates, escape, output_samples
from support.scrape_checks import assert_parses

SHARED, IDLE = UUIDS  # a time-sliced GPU held by the generated pods; a GPU nobody holds
KEYS = ("team", "app", "a_b")  # few, so that upstream names and ours meet often
# Every name the exporter can add: both styles' owner labels, pod_uid, the workload pair, pod labels
# and annotations under their prefixes; upstream label sets are drawn from these (and more).
OUR_NAMES = sorted({name for style in LABEL_STYLES.values() for name, _ in style}
                   | {"pod_uid", "workload_kind", "workload"}
                   | {f"{prefix}_{key}" for prefix in ("label", "annotation") for key in KEYS})
UPSTREAM_NAMES = sorted(set(OUR_NAMES) | UPSTREAM_OWNER_LABELS | {"modelName", "Hostname", "hostname", "app", "vgpu"})
values = st.sampled_from(["x", "trainer", "", 'q"uote', "Deployment", "0"])


@st.composite
def extras(draw) -> Tuple[Tuple[str, str], ...]:
    """A pod's extra labels as the Kubernetes source writes them: pod_uid, workload_kind, workload,
    label_* sorted, annotation_* sorted; each part present or not."""
    pairs: List[Tuple[str, str]] = []
    if draw(st.booleans()):
        pairs.append(("pod_uid", draw(values)))
    if draw(st.booleans()):
        pairs += [("workload_kind", "Deployment"), ("workload", draw(values))]
    for prefix in ("label", "annotation"):
        pairs += [(f"{prefix}_{key}", draw(values)) for key in draw(st.lists(st.sampled_from(KEYS), unique=True))]
    return tuple(pairs)


@st.composite
def node(draw):
    """(mapping, body): pods sharing one GPU, with extras; upstream samples of it and of an idle GPU
    whose label sets hold any of the names the exporter adds, and dcgm-exporter's per-pod copies."""
    pods = draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
    devices = [AllocatedDevice("ml", pod, "main", "nvidia.com/gpu.shared", f"{SHARED}::{i}") for i, pod in enumerate(pods)]
    mapping = build_mapping(DEVICE_FORMS, devices)
    mapping = dataclasses.replace(mapping, extra_labels={("ml", pod): draw(extras()) for pod in pods})
    lines: List[str] = []
    for family in draw(st.lists(st.sampled_from(["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_SM_CLOCK", "other"]),
                                min_size=1, unique=True)):
        lines.append(f"# TYPE {family} gauge")
        for uuid in (SHARED, IDLE):
            names = draw(st.lists(st.sampled_from(UPSTREAM_NAMES), unique=True, max_size=8))
            upstream = [("gpu", "0"), ("UUID", uuid)] + [(name, draw(values)) for name in names]
            draw(st.randoms()).shuffle(upstream)
            # dcgm-exporter -k per-pod copies: they differ in its attribution only (else they are repeats)
            copies = draw(st.integers(1, 3)) if UPSTREAM_OWNER_LABELS.intersection(names) else 1
            for copy in range(copies):
                pairs = [(n, f"{v}{copy}" if n in UPSTREAM_OWNER_LABELS else v) for n, v in upstream]
                labels = ",".join(f'{n}="{escape(v)}"' for n, v in pairs)
                lines.append(f"{family}{{{labels}}} {draw(st.integers(0, 99))}")
    return mapping, "".join(line + "\n" for line in lines)


def _ours(mapping, style) -> Dict[Tuple[str, str], Dict[str, str]]:
    """(namespace, pod) → every label the exporter adds for it, by name."""
    return {(owner.namespace, owner.pod): dict([(name, owner[index]) for name, index in LABEL_STYLES[style]]
                                               + list(mapping.extra_labels.get((owner.namespace, owner.pod), ())))
            for owners in mapping.owners.values() for owner in owners}


def _check(out: str, mapping, style: str) -> None:
    list(text_string_to_metric_families(out))  # raises on a label name twice, among others
    written = output_samples(out)
    assert_no_duplicates(written)
    ours = _ours(mapping, style)
    pod_label = "pod" if style == "kubernetes" else "pod_name"
    for name, pairs, _ in written:
        labels = dict(pairs)
        # Held (a sample of the shared GPU, or a holder's allocated-GPU count): every name we add
        # carries our value, and nothing else of ours.
        if ("UUID", SHARED) in pairs or name == families.ALLOCATED_GPUS.name:
            wanted = ours[("ml", labels[pod_label])]
            assert {n: labels[n] for n in wanted} == wanted, (name, pairs)
            assert not UPSTREAM_OWNER_LABELS & (set(labels) - set(wanted)), (name, pairs)
        else:  # idle: none of upstream's attribution stays, and nothing of ours is added
            assert not UPSTREAM_OWNER_LABELS & set(labels), (name, pairs)


@SETTINGS
@given(node(), st.sampled_from(sorted(LABEL_STYLES)))
def test_no_label_name_twice_whatever_upstream_sends(generated, style):
    mapping, body = generated
    result = Rewriter(mapping, style).rewrite(body.encode())
    assert result.malformed == 0
    out = result.text.decode() + render_allocation_info(mapping, result.identities, style)
    _check(out, mapping, style)
    # One series per owner of the shared GPU in each family, and one of the idle GPU.
    gpu_samples = [name for name, _, _ in output_samples(out) if not name.startswith("pod_gpu_")]
    holders = len({allocation.owner for allocation in mapping.allocations})
    assert len(gpu_samples) == len(set(gpu_samples)) * (holders + 1)
    streamed = rewrite_streamed(SeriesBuilder(mapping, style), body.encode(), 64)
    assert streamed.text == result.text


@settings(SETTINGS, max_examples=25)
@given(node(), st.sampled_from(sorted(LABEL_STYLES)))
def test_promtool_reads_every_generated_output(generated, style):
    mapping, body = generated
    result = Rewriter(mapping, style).rewrite(body.encode())
    assert_parses(result.text.decode() + render_allocation_info(mapping, result.identities, style))
