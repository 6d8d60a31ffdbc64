"""Checks of the objects the API server sends before they reach a cache: the shape we read, and this node.

An object that fails is skipped and counted (never fatal): a proxy may ignore the fieldSelector, an
admission webhook or an old client may have stored a label value JSON cannot type as a string.
"""

from __future__ import annotations

from typing import Callable


class Skipped(Exception):
    """An object left out of the cache; `reason` is `malformed` or `other_node`."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def _string_map(value, field: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise Skipped("malformed", f"metadata.{field} is not a map of strings")


def _named(obj, namespaced: bool) -> None:
    meta = getattr(obj, "metadata", None)
    if meta is None:
        raise Skipped("malformed", "no metadata")
    if not isinstance(meta.name, str) or not meta.name:
        raise Skipped("malformed", "no metadata.name")
    if namespaced and (not isinstance(meta.namespace, str) or not meta.namespace):
        raise Skipped("malformed", "no metadata.namespace")
    _string_map(meta.labels, "labels")
    _string_map(meta.annotations, "annotations")


def _on_node(node_name: str, found, what: str) -> None:
    if found != node_name:
        raise Skipped("other_node", f"{what} is {found!r}, not this node {node_name!r}")


def cluster_object_check(obj) -> None:
    """Raises Skipped for a cluster-scoped object without a name or with labels that are no map of strings."""
    _named(obj, namespaced=False)


def pod_check(node_name: str) -> Callable[[object], None]:
    """Raises Skipped for a pod we cannot read or one bound to another node."""

    def check(pod) -> None:
        _named(pod, namespaced=True)
        spec = pod.spec
        _on_node(node_name, spec.nodeName if spec is not None else None, "spec.nodeName")

    return check


def slice_check(node_name: str) -> Callable[[object], None]:
    """Raises Skipped for a ResourceSlice we cannot read or one published for another node."""

    def check(resource_slice) -> None:
        _named(resource_slice, namespaced=False)
        spec = resource_slice.spec
        if spec is None or not isinstance(spec.driver, str):
            raise Skipped("malformed", "no spec.driver")
        _on_node(node_name, spec.nodeName, "spec.nodeName")

    return check
