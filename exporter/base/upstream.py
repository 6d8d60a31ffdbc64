"""How the logs name a GPU vendor's upstream exporter, and what they tell a user to check when its answers are wrong."""

from __future__ import annotations

from typing import NamedTuple


class UpstreamWords(NamedTuple):
    """A vendor's exporter as its users know it, and the checks to suggest for its two kinds of wrong answer."""

    name: str  # e.g. the exporter's project name
    malformed_hint: str  # what to check when it sends lines that break the text format
    no_samples_hint: str  # what to check when it answers without any GPU sample


GENERIC_UPSTREAM = UpstreamWords("the upstream exporter", "check its version and that the address points at its "
                                 "/metrics", "check its logs and the driver")
