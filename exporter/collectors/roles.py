"""The roles collectors offer one another through the hub, typed: each a name on the Hub and the protocol its value keeps."""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Protocol, Tuple, runtime_checkable


@runtime_checkable
class Upstream(Protocol):
    """Where a vendor's exporter text is fetched from: what the scraper reads on every scrape."""

    def fetch(self) -> bytes:
        """The upstream's body; raises UpstreamError (with its reason) when it cannot be had."""

    def describe(self) -> str:
        """Where it is fetched from, for logs (credentials left out)."""


@runtime_checkable
class PodIndex(Protocol):
    """This node's pods while the cluster context's store is fresh."""

    def pods(self) -> Optional[Dict[Tuple[str, str], Any]]:
        """(namespace, pod) → what is known of it, while the store is fresh; else None."""


@runtime_checkable
class MappingContextRole(Protocol):
    """What the cluster context adds to the kubelet's devices (core/mapping.MappingContext, its first method
    checked here: the core holds the whole protocol)."""

    def resolve_dra(self, device) -> object:
        """A DRA device's key from its ResourceSlice."""


@runtime_checkable
class HolderUseRole(Protocol):
    """Each holder's own use of the devices it holds, where the vendor measures it per holder."""

    def holder_use(self) -> Optional[Any]:
        """(device, owner) → its exposition.pod_numbers.HolderUse, as its own block serves it now; None for none."""


class Role(NamedTuple):
    """One role: the Hub field it is offered on and the protocol its value keeps."""

    name: str
    protocol: type

    def __str__(self) -> str:
        return self.name


UPSTREAM = Role("upstream", Upstream)
MAPPING_CONTEXT = Role("mapping_context", MappingContextRole)
POD_INDEX = Role("pod_index", PodIndex)
HOLDER_USE = Role("holder_use", HolderUseRole)
