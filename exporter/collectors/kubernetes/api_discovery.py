"""Which versions of an API group serve a resource, in one read of the API server's aggregated discovery.

Aggregated discovery (apidiscovery.k8s.io/v2, GA in Kubernetes 1.30) answers `GET /apis` asked for an
APIGroupDiscoveryList with every group, version and resource the server serves, built-ins, CRDs and
aggregated APIs alike: one read says whether a kind is served, where walking its versions costs a request
per version. Every authenticated user may read it (the system:discovery role): it needs no RBAC of ours.
A server that answers a plain APIGroupList instead (no aggregated discovery) is said so with None, and the
caller walks the versions as before.
"""

from __future__ import annotations

import json
from typing import Optional, Tuple

from exporter.collectors.kubernetes.stream import ANSWER_SECONDS, read_answer

# The aggregated list first, the plain APIGroupList as the fallback a server without it answers with.
AGGREGATED_ACCEPT = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
AGGREGATED_KIND = "APIGroupDiscoveryList"


def served_versions(http, group: str, resource: str, seconds: float = ANSWER_SECONDS) -> Optional[Tuple[str, ...]]:
    """The versions of `group` that list `resource` (the server's order: preferred first), from one read of
    `/apis` on `http` (stream.http_client's), bounded as every get is (stream.read_answer); None when the
    server answers without aggregated discovery. Raises what read_answer raises, and ValueError for an
    answer that is no JSON."""
    body = json.loads(read_answer(http, "/apis", AGGREGATED_ACCEPT, seconds))
    if not isinstance(body, dict) or body.get("kind") != AGGREGATED_KIND:
        return None
    found = []
    for item in _dicts(body.get("items")):
        metadata = item.get("metadata")
        if not isinstance(metadata, dict) or metadata.get("name") != group:
            continue
        for version in _dicts(item.get("versions")):
            name = version.get("version")
            if isinstance(name, str) and any(entry.get("resource") == resource
                                             for entry in _dicts(version.get("resources"))):
                found.append(name)
    return tuple(found)


def _dicts(value) -> list:
    """The objects of a JSON array; nothing for anything else (a malformed entry is passed over)."""
    return [entry for entry in value if isinstance(entry, dict)] if isinstance(value, list) else []
