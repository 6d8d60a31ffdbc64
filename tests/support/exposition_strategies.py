"""Hypothesis strategies for exposition text and kubelet mappings, and readers that check what comes back
independently of the exporter's own parser."""

from __future__ import annotations

import functools
import re
from typing import List, NamedTuple, Optional, Tuple

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from exporter.core.identity import Owner
from exporter.core.mapping import Mapping, build_mapping
from exporter.exposition.labels import LABEL_STYLES, UPSTREAM_OWNER_LABELS
from exporter.sources.kubelet import AllocatedDevice
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS

# No "explain" phase: on a failure it costs minutes here and the shrunk example says enough.
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink])

UUIDS = ("GPU-c2f76b33-7953-256e-8f33-1343419b1a1c", "GPU-0a1b2c3d-0000-1111-2222-333344445555")
INDEXES = ("0", "1", "2")
INSTANCES = ("1", "2", "7")
IDENTITY_VALUES = {
    "UUID": st.sampled_from(UUIDS),
    "uuid": st.sampled_from(UUIDS),
    "gpu": st.sampled_from(INDEXES),
    "device": st.sampled_from([f"nvidia{i}" for i in INDEXES]),
    "GPU_I_ID": st.sampled_from(INSTANCES),
}
OWNER_NAMES = sorted(UPSTREAM_OWNER_LABELS)
VALUE_TEXTS = ("1", "0", "-1", "16.365000", "4.55497156e+08", "NaN", "+Inf", "-Inf", "9223372036854775794",
               ".5", "1e-3", "1E+10", "0.000000")

# ---------------------------------------------------------------- generated exposition text

metric_names = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True)
# Names starting "__" are reserved for Prometheus itself; dcgm-exporter never sends them.
plain_label_names = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,10}", fullmatch=True).filter(
    lambda name: name not in IDENTITY_VALUES and name not in UPSTREAM_OWNER_LABELS)
label_texts = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
    st.sampled_from(['a\\b', 'say "hi"', "two\nlines", "\\n is not a newline", "NVIDIA L4", "", "}{,=\" "]),
)
value_texts = st.one_of(
    st.sampled_from(VALUE_TEXTS),
    st.integers(-(2**63), 2**64).map(str),
    st.floats(allow_nan=False, allow_infinity=False).flatmap(
        lambda x: st.sampled_from([f"{x:f}", f"{x:g}", repr(x)])),
)
# No sign: Prometheus' parser fails the whole scrape on a negative timestamp (its lexer has none).
timestamps = st.one_of(st.none(), st.integers(0, 2**45).map(str))
help_texts = st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=20).map(
    lambda text: text.replace("\\", "\\\\"))


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def label_pairs(draw) -> List[Tuple[str, str]]:
    """One sample's labels: GPU identity labels, ordinary ones and upstream owner labels, any order."""
    names = draw(st.lists(st.one_of(st.sampled_from(sorted(IDENTITY_VALUES)), st.sampled_from(OWNER_NAMES),
                                    plain_label_names), max_size=7, unique=True))
    return [(name, draw(IDENTITY_VALUES.get(name, label_texts))) for name in names]


class Sample(NamedTuple):
    name: str
    labels: List[Tuple[str, str]]  # unescaped values, in input order
    value: str
    timestamp: Optional[str]

    def non_owner(self) -> List[Tuple[str, str]]:
        return [(n, v) for n, v in self.labels if n not in UPSTREAM_OWNER_LABELS]

    def rest(self) -> str:
        return f" {self.value}" + (f" {self.timestamp}" if self.timestamp is not None else "")


@st.composite
def families(draw) -> Tuple[str, List[Sample]]:
    """Exposition text of a few families (HELP/TYPE optional) and the samples it holds.

    Series are distinct once owner labels are set aside: owner labels are replaced by the exporter,
    so two samples differing only in them are one series (a separate property covers those).
    """
    lines: List[str] = []
    samples: List[Sample] = []
    for name in draw(st.lists(metric_names, min_size=1, max_size=4, unique=True)):
        if draw(st.booleans()):
            lines.append(f"# HELP {name} {draw(help_texts)}".rstrip())
        if draw(st.booleans()):
            lines.append(f"# TYPE {name} {draw(st.sampled_from(['gauge', 'counter', 'untyped']))}")
        label_sets = draw(st.lists(label_pairs(), max_size=5,
                                   unique_by=lambda pairs: frozenset(p for p in pairs if p[0] not in UPSTREAM_OWNER_LABELS)))
        for pairs in label_sets:
            sample = Sample(name, pairs, draw(value_texts), draw(timestamps))
            samples.append(sample)
            lines.append(render(sample, draw(st.sampled_from([",", ", "])), draw(st.booleans())))
    return "\n".join(lines) + "\n", samples


def render(sample: Sample, separator: str, trailing_comma: bool) -> str:
    if not sample.labels:
        return f"{sample.name}{sample.rest()}"
    labels = separator.join(f'{n}="{escape(v)}"' for n, v in sample.labels)
    return f"{sample.name}{{{labels}{',' if trailing_comma else ''}}}{sample.rest()}"


# ---------------------------------------------------------------- generated kubelet answers

owner_texts = st.one_of(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True), label_texts)
device_ids = st.one_of(
    st.sampled_from(UUIDS), st.sampled_from(UUIDS).map(lambda u: f"{u}::{3}"), st.sampled_from(INDEXES),
    st.sampled_from([f"nvidia{i}" for i in INDEXES]), st.sampled_from(["nvidia0/vgpu1", "nvidia1/gi2", "nvidia0/gi7"]),
    st.sampled_from(UUIDS).map(lambda u: f"MIG-{u}/1/0"), st.sampled_from(["MIG-2f8d7a5c-1111-2222", "fpga-2"]),
)


@st.composite
def allocated_devices(draw) -> AllocatedDevice:
    namespace, pod, container = draw(owner_texts), draw(owner_texts), draw(owner_texts)
    if draw(st.integers(0, 9)) == 0:  # NVIDIA's DRA driver
        return AllocatedDevice(namespace, pod, container, "gpu.nvidia.com",
                               draw(st.sampled_from(["gpu-0", "gpu-1", "gpu-1-mig-1-0"])), dra=True, claim="ns/c")
    resource = draw(st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb",
                                     "example.com/fpga"]))
    return AllocatedDevice(namespace, pod, container, resource, draw(device_ids))


mappings = st.lists(allocated_devices(), max_size=6).map(functools.partial(build_mapping, DEVICE_FORMS))
styles = st.sampled_from(sorted(LABEL_STYLES))

# ---------------------------------------------------------------- reading the output back


_PAIR = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def unescape(value: str) -> str:
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def read_sample(line: str) -> Tuple[str, List[Tuple[str, str]], str]:
    """(name, [(label, unescaped value)…], rest) of one output sample line; written apart from the exporter."""
    brace = line.find("{")
    name_end = brace if brace >= 0 else line.index(" ")
    if brace < 0:
        return line[:name_end], [], line[name_end:]
    pairs, position = [], brace + 1
    while line[position] != "}":
        match = _PAIR.match(line, position)
        assert match, f"unreadable labels at {position}: {line!r}"
        pairs.append((match.group(1), unescape(match.group(2))))
        position = match.end()
    return line[:brace], pairs, line[position + 1:]


def expected_owners(sample: Sample, mapping: Mapping) -> List[Owner]:
    """Owners whose device the sample names: the key label's value, and the same GPU instance."""
    labels = dict(sample.labels)
    uuid = labels.get("UUID", labels.get("uuid", ""))
    carried = {"UUID": uuid, "gpu": labels.get("gpu", ""), "device": labels.get("device", "")}
    instance = labels.get("GPU_I_ID", "")
    owners = {a.owner for a in mapping.allocations
              if a.key is not None and carried[a.key.label] == a.key.value != "" and a.key.instance == instance}
    return sorted(owners)


def owner_pairs(owner: Owner, style: str) -> List[Tuple[str, str]]:
    return [(name, owner[index]) for name, index in LABEL_STYLES[style]]


def appended_owner(pairs: List[Tuple[str, str]], style: str) -> bool:
    """Whether labels after the kept ones are nothing, or exactly one owner in the style's order."""
    return not pairs or [name for name, _ in pairs] == [name for name, _ in LABEL_STYLES[style]]


def output_samples(text: str) -> List[Tuple[str, List[Tuple[str, str]], str]]:
    return [read_sample(line) for line in text.split("\n") if line and not line.startswith("#")]


def assert_no_duplicates(samples) -> None:
    series = [(name, frozenset(pairs)) for name, pairs, _ in samples]
    assert len(series) == len(set(series)), "a series is repeated"
    for name, pairs, _ in samples:
        names = [n for n, _ in pairs]
        assert len(names) == len(set(names)), f"a label name is repeated in {name}{pairs}"
