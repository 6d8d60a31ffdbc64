"""Line-level rewrite of Prometheus text: owner labels appended, everything else passed byte for byte.

Samples are never parsed into numbers and rendered again: prometheus_client's parser/renderer would
rename counters that lack `_total` (dcgm-exporter has several) and reformat value text. Instead each
line is split into name, label text and the rest, checked against the 0.0.4 text format, and written
back from the original substrings.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Tuple

from exporter.core.identity import GpuKey, Owner, sample_keys
from exporter.core.mapping import Mapping
from exporter.exposition.template import VALUE, BodyTemplate

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
# re.ASCII: otherwise case-insensitive inf/nan would also match look-alike letters such as the
# dotless ı, which Prometheus' parser rejects.
_VALUE_AND_TIMESTAMP = re.compile(rf"[ \t]+{VALUE}(?:[ \t]+[-+]?[0-9]+)?[ \t]*", re.ASCII)
# HELP text allows only the escapes \\ and \n; anything else makes the Go parser reject the scrape.
_HELP = re.compile(r"# HELP[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t](?:[^\\]|\\[\\n])*)?")
_TYPE = re.compile(r"# TYPE[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]+(counter|gauge|histogram|summary|untyped)[ \t]*")
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by surrogateescape
_UNSEEN = object()  # not in a cache, told apart from a cached None (known to be malformed)

# The caches of series and label sets keep what the last rewrite used; once they hold more entries
# than twice its lines (plus this slack), a churning upstream (label values new on every scrape) has filled
# them with series that will not come back, and they are cut back to the last rewrite's.
_CACHE_SLACK_ENTRIES = 1024
# Bodies past STREAM_MIN_LINES lines are rewritten a slice at a time without per-line state
# (exporter.exposition.streamed): a line costs ~0.6 KiB of Python objects while it is rewritten, so a foreign
# 8 MiB answer of tiny lines would otherwise need ~330 MiB. Bodies past STREAM_MIN_BYTES keep
# per-line state (and get a template) only while their lines share label sets, as dcgm-exporter's
# do (one set per GPU or MIG instance: 256 on a 25,600-series, 6 MB node); a foreign answer of long
# unique series (kube-state-metrics) needs ~1 KiB a line more for its label sets and is streamed.
STREAM_MIN_BYTES = 4 * 1024 * 1024
STREAM_MIN_LINES = 32_768
LARGE_BODY_MAX_LABEL_SETS = 4096
# At most this many bodies are rewritten line by line without trying a template (see Rewriter).
_MAX_BUILD_BACKOFF = 32


class _TooManyLabelSets(Exception):
    """A large body's lines do not share label sets: it is streamed instead (see STREAM_MIN_BYTES)."""


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

SELF_METRIC_PREFIX = "pod_gpu_exporter_"


def is_reserved_name(name: str) -> bool:
    """Names this exporter writes itself; upstream copies of them (--dcgm.url pointed at another
    instance of us) would be duplicate families, so they are dropped as malformed."""
    return name.startswith(SELF_METRIC_PREFIX) or name == ALLOCATION_INFO


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_owner_labels(owner: Owner, style: str) -> str:
    """The `name="value",…` text appended for an owner, in the style's order."""
    return ",".join(f'{name}="{escape_label_value(owner[index])}"' for name, index in LABEL_STYLES[style])


class _LabelSet(NamedTuple):
    variants: Tuple[str, ...]  # label text to emit, one per owner (or the stripped original)
    identity: Optional[Identity]
    # The kept upstream pairs sorted, then the first owner's: the same series whatever order its
    # labels came in (Prometheus sorts them too, and rejects the second as a duplicate).
    key_text: str


class _Series(NamedTuple):
    """The part of a sample line before its value (its head), checked and rewritten once."""

    outputs: Tuple[str, ...]  # `name{labels…}` to emit, one per owner (or the stripped original)
    identity: Optional[Identity]
    # (name, sorted upstream labels and first owner): what makes it one series in a scrape. A pair,
    # not one string: the label part is the label set's own object, shared by every family of a
    # GPU, where a string per series cost ~300 bytes each (8 MB on a 25,600-series node).
    key: Tuple[str, str]
    head: str  # as received, to tell an exact repeat from an upstream per-pod copy
    name: str  # the metric name, to refuse a TYPE line that comes after its samples


class Rewriter:
    """Rewrites scrapes for one Mapping; series repeat between scrapes (only values move), so the
    work on everything but the value is done once per series and cached."""

    def __init__(self, mapping: Mapping, style: str = "kubernetes"):
        if style not in LABEL_STYLES:
            raise ValueError(f"unknown label style {style!r}")
        self.mapping = mapping
        self.style = style
        extras = mapping.extra_labels
        self._owner_text = {
            owner: render_owner_labels(owner, style) + extras.get((owner.namespace, owner.pod), "")
            for owners in mapping.owners.values() for owner in owners
        }
        self._label_sets: Dict[str, Optional[_LabelSet]] = {}
        self._series: Dict[str, Optional[_Series]] = {}
        self._template: Optional[BodyTemplate] = None
        self.refills = 0  # rewrites done by refilling the last body's template (see exporter.exposition.template)
        # Building a template costs about a line-by-line rewrite. An upstream whose every body differs
        # in more than values (timestamps, churning series) would pay it on every scrape for nothing,
        # so a template that does not fit the very body it was built for makes the next ones wait.
        self._bodies_before_next_build = 0
        self._build_backoff = 0
        self._label_set_budget: Optional[int] = None  # while a large body is rewritten line by line
        self.wasted_template_builds = 0

    def rewrite(self, body: bytes) -> RewriteResult:
        template = self._template
        if template is not None:
            built_now = not template.built and self._bodies_before_next_build == 0 and template.may_fit(body)
            if built_now:
                # A fitting template answers without the caches; they would only speed up the next
                # line-by-line rewrite, which mostly follows a new mapping (and a new Rewriter) anyway.
                # Let them go first: the cut pieces take about as much memory again.
                self._series, self._label_sets = {}, {}
                template.build()
            text = template.fill(body) if template.built else None
            if text is not None:  # the same series as last time, new plain values: no line loop
                self.refills += 1
                self._build_backoff = 0
                return RewriteResult(text, template.malformed, template.identities)
            if built_now:  # built for this body in vain
                self.wasted_template_builds += 1
                self._build_backoff = min(2 * self._build_backoff or 1, _MAX_BUILD_BACKOFF)
                self._bodies_before_next_build = self._build_backoff
            elif not template.built:
                self._bodies_before_next_build = max(0, self._bodies_before_next_build - 1)
        if len(body) <= STREAM_MIN_BYTES:
            return self._rewrite_lines(body)
        self._label_set_budget = LARGE_BODY_MAX_LABEL_SETS
        try:
            return self._rewrite_lines(body)
        except _TooManyLabelSets:
            self._series, self._label_sets = {}, {}
            return self._rewrite_streamed(body)
        finally:
            self._label_set_budget = None

    def _rewrite_streamed(self, body: bytes) -> RewriteResult:
        # Imported here: exporter.exposition.streamed builds on this module, and only such bodies need it.
        from exporter.exposition.streamed import rewrite_streamed

        self._template = None
        return rewrite_streamed(self, body)

    def _rewrite_lines(self, body: bytes) -> RewriteResult:
        """The rewrite, line by line; what became of each line is kept as the next template."""
        text, maybe_undecodable = _decode(body)
        out: List[str] = []
        ends: List[int] = []  # for each input line, len(out) once it was done
        rests: List[Optional[str]] = []  # for each input line that is a sample, the text after its series
        malformed = 0
        described: set = set()  # (kind, name) of HELP/TYPE lines already written
        sampled: set = set()  # metric names with samples written
        written: Dict[str, _Series] = {}  # the series written so far, by key
        known = self._series
        lines = text.split("\n")
        if len(lines) > STREAM_MIN_LINES + 1:
            # Counted here rather than before: bytes.count over a 1.8 MB body costs ~1 ms per scrape.
            del text, lines
            return self._rewrite_streamed(body)
        # What follows the last newline: "" in a whole answer; anything else was cut short (a value
        # "71" may have arrived as "7"), so it is never served. Kept as a line of its own (no
        # output) so that the template's lines still match the body's.
        tail = lines.pop()
        for line in lines:
            rest = None
            if not line or line.isspace():
                pass
            elif maybe_undecodable and _UNDECODABLE.search(line):
                malformed += 1
            else:
                if line[0] in " \t":
                    line = line.lstrip(" \t")  # the format allows leading blanks; Prometheus skips them
                if line[0] == "#":
                    malformed += self._copy_comment(line, described, sampled, out)
                else:
                    # The fast path of this loop: a series seen in an earlier scrape, not yet written
                    # in this one, with a valid value. Anything else takes _copy_sample, which handles
                    # every case itself.
                    close = line.rfind("}")
                    head, rest = line[: close + 1], line[close + 1 :]  # no "}": head "", rest the whole line
                    series = known.get(head)
                    if series is not None and series.key not in written and _is_value(rest):
                        written[series.key] = series
                        sampled.add(series.name)
                        for output in series.outputs:
                            out.append(output + rest)
                    else:
                        dropped, rest = self._copy_sample(line, head, rest, out, written, sampled)
                        malformed += dropped
            ends.append(len(out))
            rests.append(rest)
        malformed += _cut_short(tail)
        ends.append(len(out))
        rests.append(None)
        line_count = len(lines)
        # The decoded body and its lines are as large as the output that is joined next: let them go.
        text = lines = line = None
        identities = frozenset(series.identity for series in written.values() if series.identity is not None)
        self._template = BodyTemplate(body, out, ends, rests, malformed, identities)
        self._trim_caches(line_count, written)
        return RewriteResult("\n".join(out + [""]).encode("utf-8"), malformed, identities)

    def _trim_caches(self, lines: int, written: Dict[str, _Series]) -> None:
        """Cut the caches back to the series of this rewrite once they hold twice as many entries as
        it had lines: bounded by what one answer needs, whatever label values do from scrape to
        scrape. (By lines, not series: per-pod copies from dcgm-exporter -k are heads of their own.)"""
        if len(self._series) > 2 * lines + _CACHE_SLACK_ENTRIES:
            self._series = {series.head: series for series in written.values()}
            self._label_sets = {}

    def _copy_comment(self, line: str, described: set, sampled: set, out: List[str]) -> int:
        """Keep HELP/TYPE lines as written; return 1 when the line must be dropped as malformed."""
        if line.startswith(("# HELP ", "# HELP\t")):
            match = _HELP.fullmatch(line)
            kind = "HELP"
        elif line.startswith(("# TYPE ", "# TYPE\t")):
            match = _TYPE.fullmatch(line)
            kind = "TYPE"
        elif line[1:].split(None, 1)[:1] in (["HELP"], ["TYPE"]):
            # `# HELP` with nothing after it (an upstream line cut short) is a plain comment to
            # Prometheus, but prometheus_client 0.17's parser (our declared floor) fails the whole
            # text on it: dropped like any line that breaks a parser.
            return 1
        else:
            out.append(line)  # any other comment is allowed by the format and harmless
            return 0
        if not match or is_reserved_name(match.group(1)):
            return 1
        name = match.group(1)
        # A family described twice (an upstream repeating itself) would fail every parser downstream;
        # the first description wins (its samples are kept unless they repeat a series: _copy_sample).
        if (kind, name) in described:
            return 0
        if kind == "TYPE" and name in sampled:
            return 1  # a first TYPE after its family's samples: the Go parser rejects the scrape for it
        described.add((kind, name))
        out.append(line)
        return 0

    def _copy_sample(self, line: str, head: str, rest: str, out: List[str], written: Dict[str, _Series],
                     sampled: set) -> Tuple[int, str]:
        """Copy one sample line (once per owner); return (1 when it must be dropped as malformed, else
        0; the text after its series: value and timestamp).

        `head` is the line up to its last "}" and `rest` what follows.
        """
        if head:
            series = self._series_for(head)
        else:
            series, rest = _split_unlabelled(line)
        if series is None or not _is_value(rest):
            return 1, rest
        # The text format allows each series (name + labels) once; Prometheus rejects repeats within a
        # scrape. A repeated line (an upstream sending a family twice) is malformed; lines that differ
        # only in upstream owner labels (dcgm-exporter -k copies samples per pod) become the same
        # series once ours replace them, so the first is kept and the rest dropped without complaint.
        first = written.get(series.key)
        if first is not None:
            return int(_same_head(first.head, series.head)), rest
        written[series.key] = series
        sampled.add(series.name)
        for output in series.outputs:
            out.append(output + rest)
        return 0, rest

    def _series_for(self, head: str) -> Optional[_Series]:
        # From one collection to the next only values change, so all the work on a line's head
        # (checks, owner lookup, rendering) is done once and looked up after, in rewrite().
        series = self._series.get(head, _UNSEEN)
        if series is not _UNSEEN:
            return series
        series = self._series[head] = self._build_series(head)
        return series

    def _build_series(self, head: str, cache: bool = True) -> Optional[_Series]:
        """`name{labels}` checked and rewritten; None when it breaks the text format."""
        brace = head.find("{")
        name = head[:brace].rstrip(" \t")  # `name {…}` is valid text too
        if brace < 0 or not _METRIC_NAME.fullmatch(name) or is_reserved_name(name):
            return None
        label_text = head[brace + 1 : -1]
        label_set = self._label_set(label_text) if cache else self._build_label_set(label_text)
        if label_set is None:
            return None
        outputs = tuple([f"{name}{{{labels}}}" for labels in label_set.variants])
        return _Series(outputs, label_set.identity, (name, label_set.key_text), head, name)

    def _label_set(self, label_text: str) -> Optional[_LabelSet]:
        try:
            return self._label_sets[label_text]
        except KeyError:
            pass
        if self._label_set_budget is not None and len(self._label_sets) >= self._label_set_budget:
            raise _TooManyLabelSets()
        label_set = self._label_sets[label_text] = self._build_label_set(label_text)
        return label_set

    def _build_label_set(self, label_text: str) -> Optional[_LabelSet]:
        pairs = _parse_label_pairs(label_text)
        if pairs is None:
            return None
        values = {name: value for name, value, _ in pairs}
        kept = ",".join(span for name, _, span in pairs if name not in UPSTREAM_OWNER_LABELS)
        key_text = ",".join(sorted(f'{name}="{value}"' for name, value, _ in pairs if name not in UPSTREAM_OWNER_LABELS))
        identity = Identity(
            values.get("UUID") or values.get("uuid", ""),
            values.get("gpu", ""),
            values.get("device", ""),
            values.get("GPU_I_ID", ""),
        )
        if not any(identity[:3]):
            return _LabelSet((kept,), None, key_text)
        owners = self._owners(sample_keys(*identity))
        if not owners:
            return _LabelSet((kept,), identity, key_text)
        separator = "," if kept else ""
        variants = tuple(kept + separator + self._owner_text[owner] for owner in owners)
        return _LabelSet(variants, identity, key_text + "|" + self._owner_text[owners[0]])

    def _owners(self, keys: Tuple[GpuKey, ...]) -> Tuple[Owner, ...]:
        found: set = set()
        for key in keys:
            found.update(self.mapping.owners_for(key))
        return tuple(sorted(found))  # sorted: the same series in the same order on every scrape


def _is_value(text: str) -> bool:
    """Whether text after the labels is ` value[ timestamp]`; most dcgm values are plain integers,
    which are recognised without the regular expression (the same answer, ~3x faster)."""
    if text[:1] == " " and text[1:].isdigit() and text.isascii():
        return True
    return _VALUE_AND_TIMESTAMP.fullmatch(text) is not None


def _cut_short(tail: str) -> int:
    """1 when what follows a body's last newline is a line cut short (to be dropped and counted)."""
    return 0 if not tail or tail.isspace() else 1


def _same_head(first: str, again: str) -> bool:
    """Whether two heads of one series are the same line (a repeat, malformed), labels in any order,
    rather than copies that differ in upstream owner labels (dcgm-exporter -k, silently merged)."""
    # Same length first: labels in another order keep it, and per-pod copies (the common case on
    # shared GPUs) then mostly skip the parse.
    return first == again or (len(first) == len(again) and _canonical_head(first) == _canonical_head(again))


def _canonical_head(head: str) -> str:
    brace = head.find("{")
    pairs = _parse_label_pairs(head[brace + 1 : -1]) if brace >= 0 else None
    if pairs is None:
        return head
    return head[:brace].rstrip(" \t") + "{" + ",".join(sorted(f'{n}="{v}"' for n, v, _ in pairs)) + "}"


def _split_unlabelled(line: str) -> Tuple[Optional[_Series], str]:
    """(series, rest) of a sample without labels, `name value`; not cached, as dcgm sends none."""
    match = _METRIC_NAME.match(line)
    if not match or is_reserved_name(match.group()):
        return None, line
    # `name` and `name{}` are one series; keyed alike so that a repeat is caught either way.
    name = match.group()
    return _Series((name,), None, (name, ""), name + "{}", name), line[match.end() :]


def _parse_label_pairs(label_text: str) -> Optional[List[Tuple[str, str, str]]]:
    """Split `a="1",b="2"` into (name, raw value, original text) triples; None if it is not valid."""
    pairs = []
    names = set()
    position, end = 0, len(label_text)
    if not label_text.strip(" \t"):
        return pairs  # `{}` or `{ }`: no labels
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
        labels += mapping.extra_labels.get((allocation.owner.namespace, allocation.owner.pod), "")
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
