"""Pure: an integer total split by integer weights so that the parts add up to it exactly (largest remainder)."""

from __future__ import annotations

from typing import List, Sequence


def largest_remainder(total: int, weights: Sequence[int]) -> List[int]:
    """`total` split in proportion to `weights`, in whole units, the parts adding up to exactly `total`.

    Each part gets the floor of its exact quota; the units left over (fewer than there are parts) go
    one each to the largest fractional remainders, ties to the earlier part, so the split is
    deterministic. Integer arithmetic throughout: a float quota could round a part's floor up and
    hand out more than `total`. All-zero weights split evenly, so nothing is ever lost.
    """
    if len(weights) <= 1:
        return [total] * len(weights)  # one part takes all: the common case of a GPU with one instance
    if total < 0 or any(weight < 0 for weight in weights):
        raise ValueError("largest_remainder takes a non-negative total and weights")
    whole = sum(weights)
    if whole == 0:
        weights, whole = [1] * len(weights), len(weights)
    parts, remainders = [], []
    for index, weight in enumerate(weights):
        part, remainder = divmod(total * weight, whole)
        parts.append(part)
        remainders.append((-remainder, index))
    for _, index in sorted(remainders)[:total - sum(parts)]:
        parts[index] += 1
    return parts
