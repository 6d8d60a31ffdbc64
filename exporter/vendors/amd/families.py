"""AMD's own families: whether its identity service answers, and the core's count of unresolved devices in AMD's words."""

from __future__ import annotations

from typing import Tuple

from exporter.exposition.families import Family, gathered, self_family, telemetry_family

# What must be on for AMD's own families to be served: an AMD node.
AMD_NODE = "--gpu.vendor amd"
_ON_AMD = dict(modes=frozenset({AMD_NODE}))

# /gpu/metrics, in the status block.
UNRESOLVED_DEVICES = telemetry_family("pod_gpu_exporter_unresolved_devices", "Allocated GPU devices whose samples "
                                      "cannot be identified (e.g. an AMD device the identity service or sysfs cannot "
                                      "place).", **_ON_AMD)
AMD_IDENTITY_UP = telemetry_family(
    "pod_gpu_exporter_amd_identity_up", "1 when the AMD exporter's identity and health service (its gRPC List on "
    "--amd.metrics-socket) answered at its last refresh, else 0: AMD devices are then attributed by its last good "
    "answer, kept ten minutes, and by nothing after.", **_ON_AMD)

# /metrics: failed fetches of AMD's exporter.
AMD_FETCH_FAILURES = self_family("pod_gpu_exporter_amd_fetch_failures_total", "counter", "Failed fetches of the AMD "
                                 "device-metrics-exporter's metrics.", **_ON_AMD)

FAMILIES: Tuple[Family, ...] = gathered(globals())
