"""What a source hands the table: each family's samples (counters already turned into per-second rates over the
time their samples span), and the counters seen with too few samples for a rate yet."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from exporter.exposition.text import parse_label_pairs, unescape_label_value
from exporter.top.families import COUNTERS, GAUGES, PRESENCE

WANTED = frozenset(GAUGES + COUNTERS + PRESENCE)
# The labels the table reads; the rest (a dcgm sample's PCI bus ID, driver version, host name...) are
# dropped as they are read, so that a thousand nodes' answers fit in little memory.
# --labels.style legacy names the owner as the 2019 exporter did: read as the kubernetes style's names.
LEGACY_OWNER = {"pod_namespace": "namespace", "pod_name": "pod", "container_name": "container"}
# An AMD device's identity on AMD's samples and on our families there, and whether its GPU is partitioned.
AMD_DEVICE_LABELS = ("gpu_id", "gpu_partition_id", "gpu_compute_partition_type")
KEPT_LABELS = frozenset(("UUID", "gpu", "GPU_I_ID", "namespace", "pod", "container", "cluster_queue", "local_queue",
                         "status", "reason", "device_id", "vendor", *LEGACY_OWNER, *AMD_DEVICE_LABELS))
POD_LABEL_PREFIX = "label_"  # a pod's labels, as --labels.pod-labels serves them
# The cluster a sample comes from, under this name whatever the store calls it (--cluster-label); the
# exporter never serves it: Prometheus's external labels add it, or the pod proxy's context names it.
CLUSTER = "cluster"
Labels = Tuple[Tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    labels: Dict[str, str]  # `node` among them: the node the exporter serving it runs on; `cluster` where known
    value: float


@dataclass
class Readings:
    """One look at the clusters: family name → samples, and the nodes that did not answer, with why:
    (node, why) or (node, why, cluster). `unrated`: (family, labels) of the counters seen with fewer than
    two samples so far (a pod younger than one scrape, a window shorter than two scrapes): no rate yet."""

    families: Dict[str, List[Sample]] = field(default_factory=dict)
    unreachable: List[tuple] = field(default_factory=list)
    unrated: List[Tuple[str, Dict[str, str]]] = field(default_factory=list)

    def samples(self, family: str) -> List[Sample]:
        return self.families.get(family, [])

    def add(self, family: str, labels: Mapping[str, str], value: float) -> None:
        self.families.setdefault(family, []).append(Sample(_owner_names(labels), value))

    def add_unrated(self, family: str, labels: Mapping[str, str]) -> None:
        self.unrated.append((family, _owner_names(labels)))


def _owner_names(labels: Mapping[str, str]) -> Dict[str, str]:
    found = dict(labels)
    for legacy, name in LEGACY_OWNER.items():
        if legacy in found:
            found[name] = found.pop(legacy)
    return found


def parse_text(body: str, wanted: Iterable[str] = WANTED) -> Dict[Tuple[str, Labels], float]:
    """(family, labels) → value of the text format's samples of the `wanted` families; any other
    line (comments, other families, a line that does not parse) is skipped."""
    wanted = frozenset(wanted)
    found: Dict[Tuple[str, Labels], float] = {}
    strings: Dict[str, str] = {}  # one copy of each name and value: they repeat on every GPU's samples
    for line in body.splitlines():
        name_end = _name_end(line)
        if name_end <= 0 or line[:name_end] not in wanted:
            continue
        parsed = _sample(line, name_end, strings)
        if parsed is not None:
            found[(strings.setdefault(line[:name_end], line[:name_end]), parsed[0])] = parsed[1]
    return found


def _name_end(line: str) -> int:
    for index, char in enumerate(line):
        if char in "{ ":
            return index
    return -1


def _sample(line: str, name_end: int, strings: Dict[str, str]) -> Optional[Tuple[Labels, float]]:
    rest = line[name_end:]
    labels: Labels = ()
    if rest.startswith("{"):
        close = rest.rfind("}")
        if close < 0:
            return None
        pairs = parse_label_pairs(rest[1:close])
        if pairs is None:
            return None
        labels = tuple((strings.setdefault(key, key), _kept(strings, unescape_label_value(value)))
                       for key, value, _ in pairs if key in KEPT_LABELS or key.startswith(POD_LABEL_PREFIX))
        rest = rest[close + 1:]
    fields = rest.split()
    try:
        return labels, float(fields[0])
    except (IndexError, ValueError):
        return None


def _kept(strings: Dict[str, str], value: str) -> str:
    return strings.setdefault(value, value)


def rate_over_samples(points: Sequence[Tuple[float, float]]) -> Optional[float]:
    """A counter's per-second rate over the time its samples span, (time, value) in time order; None with
    fewer than two. A drop is a reset, read as rate() reads one (the counter started again from zero).

    Not rate(): rate() divides by the whole window, stretching what it saw at most half a scrape interval
    past the first and last samples, so a series younger than the window reads low (80 s of a 2 m window:
    about 0.7 of its rate). Over a series that spans the window, the two agree: both are its increase over
    the time from its first sample to its last."""
    if len(points) < 2 or points[-1][0] <= points[0][0]:
        return None
    increase = 0.0
    for (_, before), (_, after) in zip(points, points[1:]):
        increase += after - before if after >= before else after
    return increase / (points[-1][0] - points[0][0])


def per_second(first: Mapping, second: Mapping, seconds: float) -> Dict:
    """Counters' rates between two scrapes `seconds` apart, as Prometheus's rate() reads a reset
    (a counter that went down started again from zero); a series in one scrape only has none."""
    rates = {}
    for key, value in second.items():
        if key in first and seconds > 0:
            increase = value - first[key] if value >= first[key] else value
            rates[key] = increase / seconds
    return rates


def add_scrapes(readings: Readings, node: str, first: Mapping, second: Mapping, seconds: float,
                cluster: Optional[str] = None) -> None:
    """One exporter's two scrapes into `readings`: gauges as the second read them, counters as rates (a
    counter in the second alone, new since the first, is unrated); `cluster` names where it runs, when top
    reads more than one."""
    rates = per_second({k: v for k, v in first.items() if k[0] in COUNTERS},
                       {k: v for k, v in second.items() if k[0] in COUNTERS}, seconds)
    where = {"node": node, **({CLUSTER: cluster} if cluster else {})}
    for (family, labels), value in second.items():
        if family not in COUNTERS:
            readings.add(family, dict(labels, **where), value)
    for (family, labels), value in rates.items():
        readings.add(family, dict(labels, **where), value)
    for family, labels in second.keys() - rates.keys():
        if family in COUNTERS:
            readings.add_unrated(family, dict(labels, **where))
