"""Line-level rewrite of Prometheus text: owner labels appended, everything else passed byte for byte.

Samples are never parsed into numbers and rendered again: prometheus_client's parser/renderer would
rename counters that lack `_total` (dcgm-exporter has several) and reformat value text. Instead each
line is split into name, label text and the rest, checked against the 0.0.4 text format, and written
back from the original substrings.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from exporter.devices import GpuKey, Mapping, Owner, sample_keys

LABEL_STYLES = {
    # Owner field order follows each style's tradition: the seed appended pod_name, pod_namespace,
    # container_name; dcgm-exporter -k and kube-state-metrics readers expect namespace, pod, container.
    "kubernetes": (("namespace", 0), ("pod", 1), ("container", 2)),
    "legacy": (("pod_name", 1), ("pod_namespace", 0), ("container_name", 2)),
}

# Owner labels that an upstream dcgm-exporter run with -k (or --use-old-namespace) may already carry.
# They are removed from every sample so ours are the only ones: never duplicated, never stale.
UPSTREAM_OWNER_LABELS = frozenset(
    {"namespace", "pod", "container", "pod_uid", "pod_name", "pod_namespace", "container_name"}
)

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# A label pair; values allow only the three escapes the format defines (\\, \", \n).
_LABEL_PAIR = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\[\\"n])*)"[ \t]*(,|$)')
_VALUE_AND_TIMESTAMP = re.compile(
    r"[ \t]+[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|(?i:inf|infinity|nan))(?:[ \t]+-?\d+)?[ \t]*"
)
# HELP text allows only the escapes \\ and \n; anything else makes the Go parser reject the scrape.
_HELP = re.compile(r"# HELP[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t](?:[^\\]|\\[\\n])*)?")
_TYPE = re.compile(r"# TYPE[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]+(counter|gauge|histogram|summary|untyped)[ \t]*")
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by surrogateescape

# Cache of label text → rendered variants; bounded so a churning upstream cannot grow it forever.
_MAX_CACHED_LABEL_SETS = 200_000


class Identity(NamedTuple):
    """How a sample names its GPU; collected so allocations can be joined to UUID/index/instance."""

    uuid: str
    gpu: str
    device: str
    instance: str


class RewriteResult(NamedTuple):
    text: bytes
    malformed: int  # lines dropped because they break the text format
    identities: frozenset  # Identity of every GPU sample seen


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_owner_labels(owner: Owner, style: str) -> str:
    """The `name="value",…` text appended for an owner, in the style's order."""
    return ",".join(f'{name}="{escape_label_value(owner[index])}"' for name, index in LABEL_STYLES[style])


class _LabelSet(NamedTuple):
    variants: Tuple[str, ...]  # label text to emit, one per owner (or the stripped original)
    identity: Optional[Identity]


class Rewriter:
    """Rewrites scrapes for one Mapping; label sets repeat between scrapes, so their work is cached."""

    def __init__(self, mapping: Mapping, style: str = "kubernetes"):
        if style not in LABEL_STYLES:
            raise ValueError(f"unknown label style {style!r}")
        self.mapping = mapping
        self.style = style
        self._owner_text = {
            owner: render_owner_labels(owner, style) for owners in mapping.owners.values() for owner in owners
        }
        self._label_sets: Dict[str, Optional[_LabelSet]] = {}

    def rewrite(self, body: bytes) -> RewriteResult:
        text, maybe_undecodable = _decode(body)
        out: List[str] = []
        identities = set()
        malformed = 0
        described: set = set()  # (kind, name) of HELP/TYPE lines already written
        for line in text.split("\n"):
            if not line or line.isspace():
                continue
            if maybe_undecodable and _UNDECODABLE.search(line):
                malformed += 1
            elif line[0] == "#":
                malformed += self._copy_comment(line, described, out)
            elif not self._copy_sample(line, out, identities):
                malformed += 1
        out.append("")
        return RewriteResult("\n".join(out).encode("utf-8"), malformed, frozenset(identities))

    def _copy_comment(self, line: str, described: set, out: List[str]) -> int:
        """Keep HELP/TYPE lines as written; return 1 when the line must be dropped as malformed."""
        if line.startswith(("# HELP ", "# HELP\t")):
            match = _HELP.fullmatch(line)
            if not match:
                return 1
            kind, name = "HELP", match.group(1)
        elif line.startswith(("# TYPE ", "# TYPE\t")):
            match = _TYPE.fullmatch(line)
            if not match:
                return 1
            kind, name = "TYPE", match.group(1)
        else:
            out.append(line)  # any other comment is allowed by the format and harmless
            return 0
        # A family described twice (an upstream repeating itself) would fail every parser downstream;
        # the first description wins and the samples all stay.
        if (kind, name) not in described:
            described.add((kind, name))
            out.append(line)
        return 0

    def _copy_sample(self, line: str, out: List[str], identities: set) -> bool:
        brace = line.find("{")
        if brace < 0:
            return self._copy_unlabelled_sample(line, out)
        close = line.rfind("}")
        name, rest = line[:brace], line[close + 1 :]
        if close < brace or not _METRIC_NAME.fullmatch(name) or not _VALUE_AND_TIMESTAMP.fullmatch(rest):
            return False
        label_set = self._label_set(line[brace + 1 : close])
        if label_set is None:
            return False
        if label_set.identity is not None:
            identities.add(label_set.identity)
        for labels in label_set.variants:
            out.append(f"{name}{{{labels}}}{rest}")
        return True

    @staticmethod
    def _copy_unlabelled_sample(line: str, out: List[str]) -> bool:
        match = _METRIC_NAME.match(line)
        if not match or not _VALUE_AND_TIMESTAMP.fullmatch(line, match.end()):
            return False
        out.append(line)
        return True

    def _label_set(self, label_text: str) -> Optional[_LabelSet]:
        try:
            return self._label_sets[label_text]
        except KeyError:
            pass
        if len(self._label_sets) >= _MAX_CACHED_LABEL_SETS:
            self._label_sets.clear()
        label_set = self._label_sets[label_text] = self._build_label_set(label_text)
        return label_set

    def _build_label_set(self, label_text: str) -> Optional[_LabelSet]:
        pairs = _parse_label_pairs(label_text)
        if pairs is None:
            return None
        values = {name: value for name, value, _ in pairs}
        kept = ",".join(span for name, _, span in pairs if name not in UPSTREAM_OWNER_LABELS)
        identity = Identity(
            values.get("UUID") or values.get("uuid", ""),
            values.get("gpu", ""),
            values.get("device", ""),
            values.get("GPU_I_ID", ""),
        )
        if not any(identity[:3]):
            return _LabelSet((kept,), None)
        owners = self._owners(sample_keys(*identity))
        if not owners:
            return _LabelSet((kept,), identity)
        separator = "," if kept else ""
        return _LabelSet(tuple(kept + separator + self._owner_text[owner] for owner in owners), identity)

    def _owners(self, keys: Tuple[GpuKey, ...]) -> Tuple[Owner, ...]:
        found: set = set()
        for key in keys:
            found.update(self.mapping.owners_for(key))
        return tuple(sorted(found))  # sorted: the same series in the same order on every scrape


def _parse_label_pairs(label_text: str) -> Optional[List[Tuple[str, str, str]]]:
    """Split `a="1",b="2"` into (name, raw value, original text) triples; None if it is not valid."""
    pairs = []
    names = set()
    position, end = 0, len(label_text)
    while position < end:
        match = _LABEL_PAIR.match(label_text, position)
        if not match or match.group(1) in names:
            return None
        names.add(match.group(1))
        pairs.append((match.group(1), match.group(2), label_text[match.start(1) : match.end(2) + 1]))
        position = match.end()
        if not match.group(3) and position < end:
            return None
    return pairs


def _decode(body: bytes) -> Tuple[str, bool]:
    """Decode as UTF-8; bytes that are not UTF-8 survive as surrogates so their lines can be dropped."""
    try:
        return body.decode("utf-8"), False
    except UnicodeDecodeError:
        return body.decode("utf-8", errors="surrogateescape"), True


ALLOCATION_INFO = "pod_gpu_allocation_info"


def render_allocation_info(mapping: Mapping, identities: frozenset, style: str) -> str:
    """`pod_gpu_allocation_info{owner…,resource,device_id[,UUID,gpu,GPU_I_ID]} 1` for every allocation.

    UUID, gpu and GPU_I_ID come from the upstream sample that matched the device, so an index-strategy
    device ("0") still gets its UUID and a UUID device its index, for joins in PromQL.
    """
    if not mapping.allocations:
        return ""
    by_key = _identities_by_key(identities)
    lines = [
        f"# HELP {ALLOCATION_INFO} A GPU device the kubelet reports as allocated to a container (1 per device).",
        f"# TYPE {ALLOCATION_INFO} gauge",
    ]
    for allocation in mapping.allocations:
        labels = render_owner_labels(allocation.owner, style)
        labels += f',resource="{escape_label_value(allocation.resource)}"'
        labels += f',device_id="{escape_label_value(allocation.device_id)}"'
        identity = by_key.get(allocation.key) if allocation.key else None
        if identity is not None:
            labels += _identity_labels(identity)
        lines.append(f"{ALLOCATION_INFO}{{{labels}}} 1")
    return "\n".join(lines) + "\n"


def _identities_by_key(identities: frozenset) -> Dict[GpuKey, Identity]:
    by_key: Dict[GpuKey, Identity] = {}
    for identity in sorted(identities):  # sorted: the same choice on every scrape
        for key in sample_keys(*identity):
            by_key.setdefault(key, identity)
    return by_key


def _identity_labels(identity: Identity) -> str:
    text = ""
    if identity.uuid:
        text += f',UUID="{escape_label_value(identity.uuid)}"'
    if identity.gpu:
        text += f',gpu="{escape_label_value(identity.gpu)}"'
    if identity.instance:
        text += f',GPU_I_ID="{escape_label_value(identity.instance)}"'
    return text
