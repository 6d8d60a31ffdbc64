"""One upstream line checked and rewritten: a sample's series with its owners' labels, or a HELP/TYPE line kept."""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional, Tuple

from exporter.core.identity import GpuIdentity, SampleDialect
from exporter.core.mapping import Mapping
from exporter.exposition.label_limit import LabelLimit
from exporter.exposition.labels import (DEFAULT_DIALECT, LABEL_STYLES, check_label_style, owner_label_pairs,
                                        render_owner_labels)
from exporter.exposition.text import METRIC_NAME, is_float, parse_label_pairs, render_label_pairs


class RewriteResult(NamedTuple):
    text: bytes
    malformed: int  # lines dropped because they break the text format
    identities: frozenset  # GpuIdentity of every GPU sample seen


class LabelSet(NamedTuple):
    """A sample's label text, checked and rewritten once for every series that carries it."""

    variants: Tuple[str, ...]  # label text to emit, one per owner (or the stripped original)
    identity: Optional[GpuIdentity]
    # The kept upstream pairs sorted, then the first owner's: the same series whatever order its
    # labels came in (Prometheus sorts them too, and rejects the second as a duplicate).
    key_text: str
    # Whether upstream attributed it (carries one of its dialect's upstream owner labels): see Series.attributed.
    attributed: bool = False
    dropped: str = ""  # the upstream pairs ours replace, sorted: see Series.dropped
    odd_bounds: Tuple[str, ...] = ()  # see Series.odd_bounds
    # Where the vendor serves a whole GPU's figures on one of its partitions (SampleDialect.shared_figure):
    # the same labels given to no holder, and the labels the rule reads; None elsewhere (always on NVIDIA).
    unowned: Optional["LabelSet"] = None
    values: Optional[dict] = None


class Series(NamedTuple):
    """The part of a sample line before its value (its head), checked and rewritten once."""

    # The label text to emit inside `name{…}`, one per owner (or the stripped original): the label
    # set's own tuple, shared by every family of a GPU. Whole `name{labels}` strings per series cost
    # ~300 bytes each (8 MiB on a 25,600-series node) for a concatenation saved per line rewritten.
    variants: Optional[Tuple[str, ...]]  # None: a sample without labels
    identity: Optional[GpuIdentity]
    # (name, sorted upstream labels and first owner): what makes it one series in a scrape. A pair,
    # not one string: the label part is the label set's own object, shared by every family of a
    # GPU, where a string per series cost ~300 bytes each (8 MB on a 25,600-series node).
    key: Tuple[str, str]
    head: str  # as received: the key of the rewriter's cache
    name: str  # the metric name, to refuse a TYPE line that comes after its samples
    # Whether upstream attributed the line to a pod (dcgm-exporter -k). Its copies of one series
    # differ only in that attribution and collapse into one; where one of them carries none, it is the
    # device-level sample and wins: with --kubernetes-virtual-gpus dcgm-exporter keeps GPU_UTIL and
    # FB_USED's device-level sample unattributed beside per-pod copies holding each pod's own share.
    attributed: bool = False
    # The upstream pairs that ours replace, sorted: two lines of one key are the same line again (a
    # repeat, malformed) when these are equal too, and copies (dropped silently) when they differ.
    dropped: str = ""
    # Which of its `quantile` and `le` labels are not numbers: expfmt refuses the line if its family
    # is then a summary (histogram), which only the lines before it in the body tell (FamilyRecord).
    odd_bounds: Tuple[str, ...] = ()

    def lines(self, rest: str) -> List[str]:
        """The output lines of one sample whose text after the series is `rest`."""
        if self.variants is None:  # a sample without labels, written back as it came
            return [self.name + rest]
        name = self.name
        return [f"{name}{{{labels}}}{rest}" for labels in self.variants]


# Every family this exporter writes, on either path, in any mode, vendor or version, is named in its
# own namespace (the catalogue's test holds every entry to it).
OWN_NAMESPACE = "pod_gpu_"


def is_reserved_name(name: str) -> bool:
    """Names this exporter writes itself; upstream copies of them (the upstream address pointed at another
    instance of us, or at a file that kept an earlier scrape of one) would be a second HELP/TYPE of the
    same family, which client_golang's parser refuses, so they are dropped as malformed."""
    return name.startswith(OWN_NAMESPACE)


LABEL_MODES = ("samples", "join")  # --labels.mode's choices, the first its default


class SeriesBuilder:
    """Builds the Series of a sample's head for one Mapping and label style; caches nothing itself.

    `mode` join (--labels.mode) leaves every sample as upstream labels it, less upstream owner
    labels: who holds a GPU is then only on pod_gpu_allocation_info, for PromQL joins. `limit`
    (--labels.limit) cuts the extra labels each sample gets.
    """

    def __init__(self, mapping: Mapping, style: str = "kubernetes", mode: str = "samples",
                 limit: Optional[LabelLimit] = None, dialect: SampleDialect = DEFAULT_DIALECT):
        check_label_style(style)
        if mode not in LABEL_MODES:
            raise ValueError(f"unknown label mode {mode!r}")
        self.mapping = mapping
        self.style = style
        self.join = mode == "join"
        self._limit = limit if limit is not None and limit.limit is not None else None
        self._limited_text: dict = {}  # (owner, upstream label count) → owner text within the limit, or None
        self._dialect = dialect  # how the vendor's samples name a device and their own holder
        self._upstream_owners = dialect.upstream_owner_labels
        extras = mapping.extra_labels
        self._owner_text = {}
        # The names each owner's labels use: an upstream label of any of those names is replaced by
        # ours, so that no sample carries a name twice whatever upstream sends (a dcgm-exporter run
        # with --kubernetes-enable-pod-labels adds pod label keys unprefixed: `workload`, `app`, …).
        # Taken from the very pairs written, so a label added later is covered without a list to keep.
        self._owner_names = {}
        for owners in mapping.owners.values():
            for owner in owners:
                pairs = owner_label_pairs(owner, style, extras.get((owner.namespace, owner.pod), ()))
                self._owner_text[owner] = render_label_pairs(pairs)
                self._owner_names[owner] = self._upstream_owners.union(name for name, _ in pairs)

    def build_series(self, head: str,
                     label_set_of: Optional[Callable[[str], Optional[LabelSet]]] = None) -> Optional[Series]:
        """`name{labels}` checked and rewritten; None when it breaks the text format.

        `label_set_of` gives the LabelSet of a label text (a caller's cache); build_label_set by default.
        """
        brace = head.find("{")
        name = head[:brace].rstrip(" \t")  # `name {…}` is valid text too
        if brace < 0 or not METRIC_NAME.fullmatch(name) or is_reserved_name(name):
            return None
        label_set = (label_set_of or self.build_label_set)(head[brace + 1 : -1])
        if label_set is None:
            return None
        if label_set.unowned is not None and self._dialect.shared_figure(name, label_set.values):
            label_set = label_set.unowned  # a whole GPU's figure served on one partition: no holder's
        return Series(label_set.variants, label_set.identity, (name, label_set.key_text), head, name,
                      label_set.attributed, label_set.dropped, label_set.odd_bounds)

    def build_label_set(self, label_text: str) -> Optional[LabelSet]:
        """The text between a head's braces checked, stripped of the labels ours replace and given ours."""
        pairs = parse_label_pairs(label_text)
        if pairs is None:
            return None
        values = {name: value for name, value, _ in pairs}
        identity = self._dialect.identity_of(values)
        owners = self.mapping.owners_of(identity) if any(identity[:3]) and not self.join else ()
        upstream_owners = self._upstream_owners
        # One set of names for all owners of the GPU (every owner's, not each its own): the kept
        # upstream part, and so the series' key, is then the same for each of them.
        replaced = upstream_owners.union(*[self._owner_names[owner] for owner in owners])
        kept, key_text, dropped = _split(pairs, replaced)
        attributed = any(name in upstream_owners for name, _, _ in pairs)
        odd = tuple(name for name in ("quantile", "le") if name in values and not is_float(values[name]))
        if not any(identity[:3]):
            return LabelSet((kept,), None, key_text, attributed, dropped, odd)
        if not owners:
            return LabelSet((kept,), identity, key_text, attributed, dropped, odd)
        unowned = None
        if self._dialect.shared_figure is not None:  # the same labels, for a figure that is no holder's
            alone, alone_key, alone_dropped = _split(pairs, upstream_owners)
            unowned = LabelSet((alone,), identity, alone_key, attributed, alone_dropped, odd)
        if self._limit is None:
            texts = [self._owner_text[owner] for owner in owners]
        else:
            upstream = sum(1 for name, _, _ in pairs if name not in replaced)
            texts = [self._owner_text_within_limit(owner, upstream) for owner in owners]
            if texts[0] is None:  # not even the owner labels fit (the same for every owner)
                return LabelSet((kept,), identity, key_text, attributed, dropped, odd, unowned, values)
        separator = "," if kept else ""
        variants = tuple(kept + separator + text for text in texts)
        return LabelSet(variants, identity, key_text + "|" + texts[0], attributed, dropped, odd, unowned, values)

    def _owner_text_within_limit(self, owner, upstream: int) -> Optional[str]:
        key = (owner, upstream)
        if key not in self._limited_text:
            extras = self.mapping.extra_labels.get((owner.namespace, owner.pod), ())
            fitted = self._limit.fit(extras, upstream, len(LABEL_STYLES[self.style]))
            self._limited_text[key] = None if fitted is None else render_owner_labels(owner, self.style, fitted)
        return self._limited_text[key]


def _split(pairs, replaced) -> Tuple[str, str, str]:
    """(the kept label text as it came, the kept pairs sorted, the replaced pairs sorted) of a head's pairs."""
    kept = ",".join(span for name, _, span in pairs if name not in replaced)
    key_text = ",".join(sorted(f'{name}="{value}"' for name, value, _ in pairs if name not in replaced))
    dropped = ",".join(sorted(f'{name}="{value}"' for name, value, _ in pairs if name in replaced))
    return kept, key_text, dropped


def replace_copy(lines: List[str], is_first: Callable[[str], bool], new_lines: List[str]) -> None:
    """Put `new_lines` where the lines written for an upstream-attributed copy of the same series are:
    the first line whose `name{labels}` satisfies `is_first`, and those after it, one per new line.

    Rare (an upstream that writes a device-level sample after its per-pod copies), so a search from
    the end rather than a position kept for every series."""
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if is_first(line[: line.rfind("}") + 1]):
            lines[index : index + len(new_lines)] = new_lines
            return


def split_unlabelled(line: str) -> Tuple[Optional[Series], str]:
    """(series, rest) of a sample without labels, `name value`; not cached, as dcgm sends none."""
    match = METRIC_NAME.match(line)
    if not match or is_reserved_name(match.group()):
        return None, line
    # `name` and `name{}` are one series; keyed alike so that a repeat is caught either way.
    name = match.group()
    return Series(None, None, (name, ""), name + "{}", name), line[match.end() :]
