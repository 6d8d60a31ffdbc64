"""Pure: each device's model and a few device-level figures, read from one upstream answer by the vendor's figure names."""

from __future__ import annotations

import functools
import re
from typing import Callable, Dict, Iterator, Mapping, NamedTuple, Optional, Sequence, Tuple

from exporter.core.identity import GpuIdentity, SampleDialect
from exporter.exposition.template import BodyValues, picker, value_places
from exporter.exposition.text import parse_label_pairs, unescape_label_value


# The families that give one figure: (family name, what to multiply its value by for the figure's unit),
# several where a vendor's exporter names it differently by model or with an optional prefix.
Families = Tuple[Tuple[str, float], ...]


class FigureNames(NamedTuple):
    """A vendor's upstream exporter's families for the figures the core reads, its dialect (the labels that
    name a device and its holder), and the labels naming its model and its node (empty where its exporter
    has none). Handed in as Vendor.figures."""

    utilization_percent: Families  # a whole device's utilisation, 0-100
    engine_active_ratio: Families  # utilisation where the percentage is not reported (a partition's), 0-1
    memory_used_mib: Families
    memory_free_mib: Families
    memory_reserved_mib: Families
    memory_total_mib: Families  # where the exporter reports the size itself, else used + free + reserved
    power_watts: Families
    dialect: SampleDialect  # how its samples name a device and its holder, and how our rows name a device
    model_label: str
    node_name_labels: Tuple[str, ...]  # the labels carrying the node's name, first non-empty wins
    # Where a vendor serves a partitioned GPU's utilisation for the whole GPU, on one of its partitions: the label
    # saying how a sample's GPU is partitioned, and its values for a GPU that is not (whose device is then whole,
    # whatever its instance label says). Empty: every device's utilisation is its own (a MIG instance's is the
    # instance's), and a device is whole where its instance label is empty.
    partition_mode_label: str = ""
    whole_gpu_modes: Tuple[str, ...] = ("",)

    @property
    def uuid_labels(self) -> Tuple[str, ...]:
        return self.dialect.uuid_labels

    @property
    def instance_label(self) -> str:
        return self.dialect.instance_label


# The figures of the node page, by DeviceFigures field: what a person looking at a node wants first.
_PAGE_FIELDS = ("utilization_percent", "engine_active_ratio", "memory_used_mib", "memory_free_mib",
                "memory_reserved_mib", "power_watts")


class DeviceFigures(NamedTuple):
    """One GPU or partition as the answer describes it; None where the answer has no such sample."""

    model: str = ""  # the model label ("NVIDIA L4")
    hostname: str = ""  # the node's name as the upstream sees it (FigureNames.node_name_labels)
    utilization_percent: Optional[float] = None
    engine_active_ratio: Optional[float] = None
    memory_used_mib: Optional[float] = None
    memory_free_mib: Optional[float] = None
    memory_reserved_mib: Optional[float] = None
    power_watts: Optional[float] = None
    partitioned: bool = False  # one partition of a GPU whose utilisation is the whole GPU's (partition_mode_label)

    @property
    def memory_total_mib(self) -> Optional[float]:
        parts = (self.memory_used_mib, self.memory_free_mib)
        return None if None in parts else sum(parts) + (self.memory_reserved_mib or 0.0)


def families_of(names: FigureNames, fields: Tuple[str, ...]) -> Dict[bytes, Tuple[str, float]]:
    """Family name → (the FigureNames field it gives, its scale), over these fields."""
    return {family.encode(): (field, scale) for field in fields for family, scale in getattr(names, field)}


_NEWLINE = ord("\n")


class SampleLines:
    """The samples of some families in a body, each match's groups its name, the text between its braces and its
    value. Each family's samples are found by their name and brace, searched for as plain bytes (a search in C
    that skips every other line without splitting the body: several times faster than a regular expression
    stopping at each line), kept where a newline comes before them, and only what follows is matched. The
    newline is checked, not searched for: a search that starts with the byte every line ends with skips ahead
    less, and took three times as long. The matches of several families come in the body's order, so that where
    two give one figure the later sample wins."""

    def __init__(self, names: Tuple[bytes, ...], rest: bytes):
        self._families = tuple((name + b"{", re.compile(rb"(" + re.escape(name) + rb")" + rest)) for name in names)

    def finditer(self, body: bytes) -> Iterator[re.Match]:
        if len(self._families) == 1:
            return self._family(body, *self._families[0])
        matches = [match for family in self._families for match in self._family(body, *family)]
        matches.sort(key=re.Match.start)
        return iter(matches)

    @staticmethod
    def _family(body: bytes, head: bytes, sample: re.Pattern) -> Iterator[re.Match]:
        find, match_at = body.find, sample.match
        at = find(head)
        while at >= 0:
            if at == 0 or body[at - 1] == _NEWLINE:
                match = match_at(body, at)
                if match is not None:
                    yield match
            at = find(head, at + len(head))


def samples_of(families: Dict[bytes, Tuple[str, float]], value: bytes) -> SampleLines:
    """A sample of these families: its name, the text between its braces, and a value matching `value`."""
    return SampleLines(tuple(families), rb"\{([^}\n]*)\}[ \t]+(" + value + rb")")


@functools.lru_cache(maxsize=None)
def _lines(names: FigureNames, fields: Tuple[str, ...]) -> Tuple[SampleLines, Dict[bytes, Tuple[str, float]]]:
    """The samples of these figures of one vendor's exporter, and what each family gives; made once."""
    families = families_of(names, fields)
    return samples_of(families, rb"\S+"), families


class _Device(NamedTuple):
    """What one sample's labels say of its device, whatever its value."""

    identity: GpuIdentity
    model: str
    hostname: str
    partitioned: bool


_UNSEEN = object()  # a label text not remembered, told apart from one remembered as naming no device


def read_device_figures(body: bytes, names: FigureNames, fields: Tuple[str, ...] = _PAGE_FIELDS,
                        remembered: Optional[Dict[bytes, Optional[_Device]]] = None) -> Dict[GpuIdentity, DeviceFigures]:
    """Each device the answer's samples of the figures name → its figures (the last sample wins): the node page's
    figures, or these `fields` of FigureNames. `remembered`: what the last answer's label texts said, kept by a
    caller that reads every answer (a node's label texts stay while its values move: each is parsed once, not
    once per answer); left holding this answer's."""
    line, families = _lines(names, fields)
    earlier = {} if remembered is None else remembered
    seen: Dict[bytes, Optional[_Device]] = {}
    # Each device's DeviceFigures fields as a dict while the answer is read: a NamedTuple rebuilt per sample
    # cost as much again as finding the samples.
    found: Dict[GpuIdentity, Dict[str, object]] = {}
    for match in line.finditer(body):
        raw = match.group(2)
        device = seen.get(raw, _UNSEEN)
        if device is _UNSEEN:
            device = earlier.get(raw, _UNSEEN)
            seen[raw] = device = _device(raw, names) if device is _UNSEEN else device
        if device is None:
            continue  # a line the exposition grammar refuses is dropped from the answer too, or one of no device
        fields = found.get(device.identity)
        if fields is None:
            fields = found[device.identity] = {}
        _note_device(fields, device)
        value = _number(match.group(3))
        if value is not None:
            field, scale = families[match.group(1)]
            fields[field] = value * scale if scale != 1.0 else value
    if remembered is not None:  # this answer's label texts only: those that went with earlier answers are let go
        remembered.clear()
        remembered.update(seen)
    return {identity: DeviceFigures(**fields) for identity, fields in found.items()}


class FigureReader:
    """Reads some figures from each new answer of one upstream (read_device_figures), and from a refilled answer
    (BodyValues) without searching it: where its samples' values are in the refill's values is worked out once per
    template, from the first answer it refills, and then each figure is one lookup. Not thread-safe: its caller
    reads one answer at a time."""

    def __init__(self, names: FigureNames, fields: Tuple[str, ...]):
        self._names, self._fields = names, fields
        self._remembered: Dict[bytes, Optional[_Device]] = {}  # read_device_figures' label texts
        self._shape = 0  # the template whose places are known (0: none)
        self._places: Optional[_Places] = None  # None: that template's answers are read by searching them
        self.placed = 0  # answers read from their values alone: the same figures, told apart only by this count

    def read(self, body: bytes, values: Optional[BodyValues] = None) -> Dict[GpuIdentity, DeviceFigures]:
        if values is not None and values.shape != self._shape:
            self._shape, self._places = values.shape, _Places.of(body, values.values, self._names, self._fields)
        if values is None or self._places is None:
            return read_device_figures(body, self._names, self._fields, self._remembered)
        self.placed += 1
        return self._places.read(values.values)


class _Places(NamedTuple):
    """The samples of the figures in the answers of one template: each device and its DeviceFigures as far as its
    labels tell (model, node name, partitioned); `pick`, which takes the samples' values out of BodyValues.values,
    and for each (its device's number in `devices`, its field's number in DeviceFigures, its scale), in the body's
    order."""

    devices: Tuple[GpuIdentity, ...]
    fixed: Tuple[DeviceFigures, ...]  # by device
    pick: Callable[[Sequence[bytes]], Sequence[bytes]]
    targets: Tuple[Tuple[int, int, float], ...]

    @classmethod
    def of(cls, body: bytes, values: Sequence[bytes], names: FigureNames,
           fields: Tuple[str, ...]) -> Optional["_Places"]:
        """The places in `body`, refilled with `values`; None where a sample's value is not one of the values
        exactly (a line the template keeps as fixed text in a form the search reads otherwise): such answers are
        searched, so that both ways always give the same figures."""
        line, families = _lines(names, fields)
        index_at = {place: index for index, place in enumerate(value_places(body))}
        fixed: Dict[GpuIdentity, Dict[str, object]] = {}
        samples = []
        for match in line.finditer(body):
            device = _device(match.group(2), names)
            if device is None:
                continue
            index = index_at.get(match.start(3))
            if index is None or values[index] != match.group(3):
                return None
            device_fields = fixed.setdefault(device.identity, {})
            _note_device(device_fields, device)
            field, scale = families[match.group(1)]
            samples.append((index, device.identity, _FIELD_NUMBER[field], scale))
        devices = tuple(fixed)
        number = {identity: position for position, identity in enumerate(devices)}
        return cls(devices, tuple(DeviceFigures(**fixed[identity]) for identity in devices),
                   picker([index for index, _, _, _ in samples], len(values)),
                   tuple((number[identity], field, scale) for _, identity, field, scale in samples))

    def read(self, values: Sequence[bytes]) -> Dict[GpuIdentity, DeviceFigures]:
        raw = self.pick(values)
        try:  # a refill's values are plain numbers (NaN and infinities included), converted in one C-level pass
            numbers: Sequence[Optional[float]] = list(map(float, raw))
        except ValueError:  # a fixed-text line's value that is no number: each converted on its own
            numbers = [_number(item) for item in raw]
        rows = [list(figures) for figures in self.fixed]
        for (device, field, scale), value in zip(self.targets, numbers):
            if value is not None and -_INFINITY < value < _INFINITY:  # NaN and infinities are no figure
                rows[device][field] = value * scale if scale != 1.0 else value
        return dict(zip(self.devices, map(DeviceFigures._make, rows)))


_INFINITY = float("inf")
_FIELD_NUMBER = {field: number for number, field in enumerate(DeviceFigures._fields)}


def _note_device(fields: Dict[str, object], device: _Device) -> None:
    """What a sample's labels say of its device, over what earlier samples said (the last non-empty wins)."""
    if device.model:
        fields["model"] = device.model
    if device.hostname:
        fields["hostname"] = device.hostname
    if device.partitioned:
        fields["partitioned"] = True


def _device(raw: bytes, names: FigureNames) -> Optional[_Device]:
    labels = _labels(raw)
    if labels is None:
        return None
    identity = names.dialect.identity_of(labels)
    if not any(identity[:3]):
        return None
    return _Device(identity, labels.get(names.model_label, ""), _first_label(labels, names.node_name_labels),
                   _is_partitioned(labels, names))


def _is_partitioned(labels: Dict[str, str], names: FigureNames) -> bool:
    return bool(names.partition_mode_label) and partitioned_by_mode(labels, names.partition_mode_label,
                                                                    names.whole_gpu_modes)


def partitioned_by_mode(labels: Mapping[str, str], mode_label: str, whole_modes: Tuple[str, ...]) -> bool:
    """Whether a sample's GPU is one partition of a GPU split in several: its partition mode label says a mode
    other than those of a whole GPU (FigureNames.partition_mode_label and whole_gpu_modes)."""
    return labels.get(mode_label, "") not in whole_modes


def _first_label(labels: Dict[str, str], names: Tuple[str, ...]) -> str:
    """The first non-empty of these labels (a vendor's exporter renamed one across versions), else ""."""
    return next((labels[name] for name in names if labels.get(name)), "")


def _labels(raw: bytes) -> Optional[Dict[str, str]]:
    pairs = parse_label_pairs(raw.decode("utf-8", "replace"))
    return None if pairs is None else {name: unescape_label_value(value) for name, value, _ in pairs}


def _number(raw: bytes) -> Optional[float]:
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None
