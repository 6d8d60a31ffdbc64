"""What a collector adds to the node page: a column per GPU, a figure per holder, a titled block, in values the page writes."""

from __future__ import annotations

from typing import Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from exporter.core.identity import GpuIdentity, Owner

# How the page writes an Amount: bytes in GiB, a ratio as a percentage, watts with one decimal.
BYTES, RATIO, WATTS = "bytes", "ratio", "watts"
# What a cell or a block says of its GPU: UP is drawn green, DOWN red; LOST red too, and the rows of a
# GPU one of whose cells says it are shaded (the device is gone: fallen off its bus, unreachable).
UP, DOWN, LOST = "up", "down", "lost"
# Where a block goes: a section of its own after the GPU table, or a part of the "Held by nobody" section.
AFTER_GPUS, WITH_UNHELD = "after_gpus", "with_unheld"


class Amount(NamedTuple):
    """A number the page writes in its unit (BYTES, RATIO or WATTS); None is written blank."""

    number: Optional[float]
    unit: str


# One value of a cell, a figure or a block's row: text as it is, an Amount, a GPU (as the page names it:
# "3" in a table, "GPU 3 <its UUID>" in a list), a holder ("namespace/pod/container"), or None (blank).
Value = Union[None, str, Amount, GpuIdentity, Owner]


class Cell(NamedTuple):
    """One GPU's cell of a column, and what it says of that GPU (UP, DOWN, LOST or "")."""

    value: Value
    state: str = ""


class GpuColumn(NamedTuple):
    """A column of the GPU table: its name (its header) and a cell per GPU it knows (the others' are blank).
    A name the table has already ("health") fills that column for those GPUs instead of adding one; a GPU
    no other reading names gets a row of its own."""

    name: str
    cells: Mapping[GpuIdentity, Cell]


class HolderFigure(NamedTuple):
    """A figure of each holder it knows, by the GPU held and the holder: a column of the holders' part of
    the table ("memory" and "SM" fill those columns, where the device's own figures stand otherwise)."""

    name: str
    values: Mapping[Tuple[GpuIdentity, Owner], Value]


class Block(NamedTuple):
    """A titled block: a table under the names of its `columns`, or without them a list with an item per row
    (its values written one after the other). A block without rows is not shown."""

    title: str
    rows: Sequence[Sequence[Value]]
    columns: Sequence[str] = ()
    state: str = ""  # what the whole block says (LOST: drawn red)
    place: str = AFTER_GPUS


def page_order(gpu: GpuIdentity) -> tuple:
    """The order the page lists GPUs in: by NVML index as a number, then by name, MIG instances in turn."""
    index = int(gpu.gpu) if gpu.gpu.isdigit() else 1 << 30
    return (index, gpu.gpu, gpu.uuid, gpu.device, int(gpu.instance) if gpu.instance.isdigit() else 0)
