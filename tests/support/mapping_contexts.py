"""A MappingContext answering from fixed data, for unit tests of the mapping without the Kubernetes API."""

from __future__ import annotations

from exporter.core.mapping import DraResolution


class StaticContext:
    """A MappingContext, as the Kubernetes source is one: DRA resolutions by device ID, extra labels by
    pod ((namespace, name) → pairs); no pod has ended, and no pod's status is known."""

    def __init__(self, resolutions=None, labels=None, hami=None):
        self.resolutions = dict(resolutions or {})
        self.labels = dict(labels or {})
        self.hami = dict(hami or {})  # (namespace, pod) → container → (HamiDevice, …)

    def resolve_dra(self, device):
        return self.resolutions.get(device.device_id, DraResolution(False, None, False))

    def extra_labels_for(self, pods):
        return {pod: self.labels[pod] for pod in pods if pod in self.labels}

    def retain_claims(self, devices):
        pass

    def ended_pods(self, pods):
        return set()

    def resource_health_for(self, pods):
        return None  # it knows no pod's status: no device gets a health status, as with the API off

    def device_taints(self):
        return ()

    def published_drivers(self):
        return set()

    def hami_assignments(self, pods):
        return {pod: self.hami[pod] for pod in pods if pod in self.hami}
