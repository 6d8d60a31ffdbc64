"""Properties of exposition.Rewriter for generated exposition text and generated kubelet mappings."""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.devices import Mapping, Owner, build_mapping
from exporter.exposition import LABEL_STYLES, UPSTREAM_OWNER_LABELS, Rewriter
from exporter.podresources import AllocatedDevice

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
timestamps = st.one_of(st.none(), st.integers(-(2**40), 2**45).map(str))
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


mappings = st.lists(allocated_devices(), max_size=6).map(build_mapping)
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


# ---------------------------------------------------------------- properties


@SETTINGS
@given(families(), mappings, styles)
def test_every_sample_comes_back_unchanged_with_its_owners(document, mapping, style):
    text, samples = document
    result = Rewriter(mapping, style).rewrite(text.encode())
    out = result.text.decode()
    assert result.malformed == 0, "a valid line was dropped"
    list(text_string_to_metric_families(out))  # raises on anything prometheus_client cannot read
    written = output_samples(out)
    assert_no_duplicates(written)
    by_series: Dict[Tuple[str, str], List[Tuple[List[Tuple[str, str]], str]]] = {}
    for name, pairs, rest in written:
        by_series.setdefault(name, []).append((pairs, rest))
    for sample in samples:
        kept = sample.non_owner()
        owners = expected_owners(sample, mapping)
        wanted = [kept + owner_pairs(owner, style) for owner in owners] or [kept]
        found = [pairs for pairs, rest in by_series.get(sample.name, [])
                 if pairs[: len(kept)] == kept and rest == sample.rest() and appended_owner(pairs[len(kept):], style)]
        assert sorted(found) == sorted(wanted), f"{sample} came back as {found}, wanted {wanted}"
    assert len(written) == sum(max(1, len(expected_owners(s, mapping))) for s in samples)


@SETTINGS
@given(families(), mappings, styles, st.data())
def test_repeated_lines_never_repeat_a_series(document, mapping, style, data):
    """An upstream repeating lines, or copying samples per pod (dcgm-exporter -k), still gives each series once."""
    text, samples = document
    lines = text.split("\n")[:-1]  # not splitlines(): U+0085 and friends may sit inside label values
    extra = data.draw(st.lists(st.sampled_from(lines), max_size=6))
    copies = [render(s._replace(labels=[(n, "other") if n in UPSTREAM_OWNER_LABELS else (n, v) for n, v in s.labels]),
                     ",", False) for s in data.draw(st.lists(st.sampled_from(samples), max_size=4))] if samples else []
    # Every line ends with "\n": a last line without it is cut short, dropped and counted.
    result = Rewriter(mapping, style).rewrite("".join(line + "\n" for line in lines + extra + copies).encode())
    out = result.text.decode()
    list(text_string_to_metric_families(out))
    assert_no_duplicates(output_samples(out))
    help_type = [line for line in out.split("\n") if line.startswith(("# HELP", "# TYPE"))]
    assert len(help_type) == len(set(help_type))
    assert result.malformed <= len(extra) + len(copies)


@SETTINGS
@given(st.binary(max_size=3000), mappings, styles)
def test_arbitrary_bytes_never_raise(data, mapping, style):
    result = Rewriter(mapping, style).rewrite(data)
    result.text.decode("utf-8")  # always valid UTF-8 out
    assert result.malformed <= data.count(b"\n") + 1


@SETTINGS
@given(families(), mappings, styles, st.data())
def test_damaged_text_never_raises_and_keeps_the_rest_readable(document, mapping, style, data):
    """Real text with bytes cut, inserted or replaced: never raises, the output still parses."""
    body = bytearray(document[0].encode())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(body)))
        change = data.draw(st.sampled_from(["cut", "insert", "replace"]))
        junk = data.draw(st.binary(min_size=1, max_size=8))
        if change == "cut":
            del body[position:position + len(junk)]
        elif change == "insert":
            body[position:position] = junk
        else:
            body[position:position + len(junk)] = junk
    out = Rewriter(mapping, style).rewrite(bytes(body)).text.decode("utf-8")
    list(text_string_to_metric_families(out))
    assert_no_duplicates(output_samples(out))


# Tokens put where a line's value was: plain values, which a warm rewriter refills into its last
# rewrite, and everything that must send it back to the line-by-line way.
NEXT_VALUES = st.one_of(
    value_texts,
    st.sampled_from(["", "1_0", "\t1", "1\t", "1.2.3", ".", "e5", "x", "\x00", "1 2", "ınf", "١", "0x1p3", "1e"]),
)


@SETTINGS
@given(families(), mappings, styles, st.data())
def test_a_warm_rewriter_answers_exactly_as_a_fresh_one(document, mapping, style, data):
    """The template path (exporter.template) is an optimisation only: after any earlier body, the
    next body's rewrite (text, malformed count, identities) is what a fresh Rewriter makes of it."""
    first = document[0]
    lines = first.split("\n")
    for index, line in enumerate(lines):
        if line and not line.startswith("#") and data.draw(st.booleans()):
            lines[index] = line.rpartition(" ")[0] + " " + data.draw(NEXT_VALUES)
    second = "\n".join(lines)
    if data.draw(st.booleans()):  # sometimes also a line more or less, or a comment changed
        position = data.draw(st.integers(0, len(lines)))
        second = "\n".join(lines[:position] + [data.draw(st.sampled_from(["# HELP x y", "", "x 1", "x{} 2 3"]))]
                           + lines[position + 1:])
    warm = Rewriter(mapping, style)
    warm.rewrite(first.encode())
    assert warm.rewrite(second.encode()) == Rewriter(mapping, style).rewrite(second.encode())
