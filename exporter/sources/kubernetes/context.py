"""Kubernetes context from the API server: this node's pods (one watch), their workloads, DRA devices.

Everything here runs on background threads or the mapping refresher; a scrape never calls the API.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

from exporter.base.errors import ConfigError
from exporter.base.logs import log
from exporter.core.mapping import DraResolution
from exporter.sources.kubernetes.dra import DraDevices, read_claim
from exporter.sources.kubernetes.labels import LabelSpec, PodInfo, allowed_items, extra_label_pairs
from exporter.sources.kubernetes.objects import pod_check, slice_check
from exporter.sources.kubernetes.stream import ANSWER_SECONDS, http_client
from exporter.sources.kubernetes.token import use_rotating_token
from exporter.sources.kubernetes.watch import WATCH_SILENCE_SECONDS, ListWatch
from exporter.sources.kubernetes.workloads import MetadataReader, Workloads, controller_of

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MAX_PODS = 20_000  # far above any node's pod limit (110 by default); bounds memory if a selector is wrong
_MAX_GONE = 4096  # deleted pods remembered, in case the kubelet keeps reporting their devices
_ENDED_PHASES = ("Succeeded", "Failed")  # terminal: the pod's containers have all stopped for good


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(os.path.join(SERVICE_ACCOUNT_DIR, "token"))


def make_client(kubeconfig: Optional[str]):
    """A lightkube client from the kubeconfig, else the pod's service account; ConfigError when neither works."""
    from lightkube import Client
    from lightkube import ConfigError as LightkubeConfigError
    from lightkube import KubeConfig

    try:
        config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account(SERVICE_ACCOUNT_DIR)
    except (LightkubeConfigError, OSError, KeyError, ValueError) as exc:
        where = f"kubeconfig {kubeconfig}" if kubeconfig else f"service account in {SERVICE_ACCOUNT_DIR}"
        raise ConfigError(f"--kubernetes.kubeconfig: cannot load {where}: {exc}") from None
    # lightkube's default timeout (10 s per request); watches set their own read bound (watch.py).
    client = Client(config, trust_env=False)
    use_rotating_token(client)
    return client


def pod_info(pod, spec: LabelSpec) -> PodInfo:
    """The few fields kept of a Pod model."""
    meta = pod.metadata
    status = pod.status
    statuses = [] if status is None else (status.initContainerStatuses or []) + (status.containerStatuses or [])
    return PodInfo(
        uid=meta.uid or "",
        labels=allowed_items(meta.labels, spec.pod_labels),
        annotations=allowed_items(meta.annotations, spec.pod_annotations),
        controller=controller_of(meta.ownerReferences),
        containers=tuple((s.name, s.containerID) for s in statuses if s.containerID),
        ended=status is not None and status.phase in _ENDED_PHASES,
    )


def _slice_v1beta1():
    # Kubernetes 1.32-1.33 serve DRA as v1beta1 only; imported only there (each API version's models cost RSS).
    from lightkube.resources.resource_v1beta1 import ResourceSlice

    return ResourceSlice


class KubernetesContext:
    """This node's pods and DRA devices, kept by watches; labels and DRA keys computed on the refresher.

    It is the MappingContext that core.mapping.build_mapping asks for DRA keys, extra labels and
    which pods have ended.
    """

    def __init__(self, client, node_name: str, spec: LabelSpec, grace_seconds: float = 60.0,
                 resolve_mig=None, clock: Callable[[], float] = time.monotonic, read_owners=None,
                 watch_silence_seconds: float = WATCH_SILENCE_SECONDS, read_seconds: float = ANSWER_SECONDS):
        from lightkube.resources.core_v1 import Pod
        from lightkube.resources.resource_v1 import ResourceSlice

        self.node_name = node_name
        self._client = client
        self._spec = spec
        self._grace = grace_seconds
        self._clock = clock
        self._read_seconds = read_seconds  # the bound on each get's answer: owners, discovery, claims
        self._lock = threading.Lock()
        self._pods: Dict[Tuple[str, str], PodInfo] = {}
        self._gone: Dict[Tuple[str, str], bool] = {}  # pods the watch saw deleted, oldest first
        # `read_owners` replaces the API server's metadata reads in tests that need thousands of them.
        reader = None if read_owners is not None else MetadataReader(client, read_seconds, clock)
        self.workloads = Workloads(read_owners or reader.owner_references, clock,
                                   None if reader is None else (lambda version, kind: reader.plural(version, kind, read=False)[0]))
        self._healthy_until: Optional[float] = None
        self._full_logged = False
        self._unseen_logged: set = set()
        self.dra = DraDevices(self._get_claim, resolve_mig, clock)
        node = {"spec.nodeName": node_name}
        self.pod_watch = ListWatch(client, Pod, "pods", node, self._reset_pods, self._apply_pod,
                                   check=pod_check(node_name), silence_seconds=watch_silence_seconds)
        self.slice_watch = ListWatch(client, ResourceSlice, "resourceslices", node, self.dra.reset, self.dra.apply,
                                     namespaced=False, fallback=_slice_v1beta1, check=slice_check(node_name),
                                     silence_seconds=watch_silence_seconds)

    def start(self) -> None:
        self.pod_watch.start()
        self.slice_watch.start()

    def stop(self) -> None:
        self.pod_watch.stop()
        self.slice_watch.stop()

    @property
    def up(self) -> bool:
        """pod_gpu_exporter_kubernetes_api_up: the pod watch is listed and connected."""
        return self.pod_watch.healthy

    def resolve_dra(self, device) -> DraResolution:
        """A kubelet DRA device's key from its ResourceSlice, and whether its claim is adminAccess. Refresher only."""
        return self.dra.resolve(device.resource, getattr(device, "pool", ""), device.device_id, device.claim)

    def retain_claims(self, devices: List) -> None:
        """Forget the claims that none of the kubelet's devices is held through any more."""
        self.dra.retain_claims({device.claim for device in devices if device.dra})

    def pod_count(self) -> int:
        with self._lock:
            return len(self._pods)

    def pod(self, namespace: str, name: str) -> Optional[PodInfo]:
        with self._lock:
            return self._pods.get((namespace, name))

    def pods(self) -> Optional[Dict[Tuple[str, str], PodInfo]]:
        """A copy of the pod cache, (namespace, name) → PodInfo, while it is fresh (the same grace as
        the extra labels), else None. For per-process shares, on their refresher."""
        if not self._fresh():
            return None
        with self._lock:
            return dict(self._pods)

    def extra_labels_for(self, pods: Iterable[Tuple[str, str]]) -> Dict[Tuple[str, str], tuple]:
        """(namespace, pod) → the extra labels' (name, value) pairs, for the pods the cache knows. Refresher only.

        While the pod watch fails, the cache is used for up to `grace_seconds` (a reconnect must not
        turn every series into a new one), then no pod gets extras until the watch is back.
        """
        if not self._spec.enabled or not self._fresh():
            return {}
        extras: Dict[Tuple[str, str], tuple] = {}
        pods = list(pods)
        self._unseen_logged &= set(pods)  # forget pods that are gone, so the set stays bounded
        self.workloads.begin_refresh()
        for namespace, name in pods:
            info = self.pod(namespace, name)
            if info is None:
                self._log_unseen_once(namespace, name)
                continue  # not seen yet (the kubelet can be quicker than the watch): next refresh
            workload = self.workloads.of(namespace, name, info.controller) if self._spec.workload else None
            extras[(namespace, name)] = extra_label_pairs(self._spec, info, workload)
        return extras

    def ended_pods(self, pods: Iterable[Tuple[str, str]]) -> Set[Tuple[str, str]]:
        """Those of `pods` that hold no device any more, though the kubelet may still report them:
        phase Succeeded or Failed, or deleted since the watch saw them. Refresher only.

        Only while the pod cache is fresh: without a synced watch nothing is known to have ended.
        """
        if not self._fresh():
            return set()
        with self._lock:
            return {pod for pod in pods if pod in self._gone or getattr(self._pods.get(pod), "ended", False)}

    def _log_unseen_once(self, namespace: str, name: str) -> None:
        if (namespace, name) not in self._unseen_logged:
            self._unseen_logged.add((namespace, name))
            log("info", "a pod holding a GPU is not (yet) known to the API server watch: its samples lack the "
                "extra labels until it is", namespace=namespace, pod=name, node=self.node_name)

    def _fresh(self) -> bool:
        now = self._clock()
        if self.pod_watch.healthy:
            self._healthy_until = now + self._grace
            return True
        return self._healthy_until is not None and now < self._healthy_until

    # Fed by the pod ListWatch.
    def _reset_pods(self, pods: list) -> None:
        fresh = {}
        for pod in pods[:MAX_PODS]:
            fresh[(pod.metadata.namespace, pod.metadata.name)] = pod_info(pod, self._spec)
        if len(pods) > MAX_PODS:
            self._log_full(len(pods))
        listed = {(pod.metadata.namespace, pod.metadata.name) for pod in pods}
        # A list that skipped an object cannot tell a deleted pod from one it could not read: a pod
        # then missing is dropped, not taken as ended (which would take its GPU from it).
        complete = self.pod_watch.list_complete
        with self._lock:
            for key in self._pods.keys() - listed:  # deleted while the watch was away
                if complete:
                    self._forget(key)
            for key in fresh.keys() & self._gone.keys():
                del self._gone[key]
            self._pods = fresh

    def _apply_pod(self, event_type: str, pod) -> None:
        key = (pod.metadata.namespace, pod.metadata.name)
        if event_type == "DELETED":
            with self._lock:
                self._forget(key)
            return
        info = pod_info(pod, self._spec)
        with self._lock:
            self._gone.pop(key, None)  # a StatefulSet's pod comes back under its old name
            if key in self._pods or len(self._pods) < MAX_PODS:
                self._pods[key] = info
                return
        self._log_full(MAX_PODS + 1)

    def _forget(self, key: Tuple[str, str]) -> None:
        """Drop a deleted pod, remembering its name (lock held): the kubelet can report its devices still."""
        self._pods.pop(key, None)
        self._gone.pop(key, None)
        while len(self._gone) >= _MAX_GONE:
            del self._gone[next(iter(self._gone))]
        self._gone[key] = True

    def _log_full(self, count: int) -> None:
        if not self._full_logged:
            self._full_logged = True
            log("warn", "more pods on this node than the cache holds; the rest get no extra labels",
                pods=count, max_pods=MAX_PODS, node=self.node_name)

    def _get_claim(self, namespace: str, name: str):
        return read_claim(http_client(self._client), namespace, name, self._read_seconds)


def label_spec(config) -> LabelSpec:
    from exporter.sources.kubernetes.labels import compile_key_pattern, parse_extra

    pod_uid, workload = parse_extra(config.labels_extra)
    return LabelSpec(
        pod_uid=pod_uid,
        workload=workload,
        pod_labels=compile_key_pattern(config.labels_pod_labels) if config.labels_pod_labels else None,
        pod_annotations=compile_key_pattern(config.labels_pod_annotations) if config.labels_pod_annotations else None,
    )


def node_name(config) -> str:
    import socket

    return config.kubernetes_node_name or os.environ.get("NODE_NAME") or socket.gethostname()


def prepare_kubernetes(config) -> Optional[KubernetesContext]:
    """A context ready to start, or None when --kubernetes.api rules it out; ConfigError for a bad config."""
    enabled = config.kubernetes_api == "on" or (
        config.kubernetes_api == "auto" and (config.kubernetes_kubeconfig is not None or in_cluster()))
    spec = label_spec(config)
    if not enabled:
        if spec.enabled:
            log("warn", "--labels.extra/--labels.pod-labels/--labels.pod-annotations need the Kubernetes API, which "
                "is off (--kubernetes.api); they are ignored", kubernetes_api=config.kubernetes_api)
        return None
    if config.kubernetes_kubeconfig is None and not in_cluster():
        raise ConfigError("--kubernetes.api on: not running in a pod (no KUBERNETES_SERVICE_HOST and service-account "
                          "token) and no --kubernetes.kubeconfig given")
    try:
        client = make_client(config.kubernetes_kubeconfig)
    except ImportError as exc:  # a dependency, but an install with --no-deps can lack it
        if config.kubernetes_api == "on":
            raise ConfigError(f"--kubernetes.api on: the client library is missing ({exc}): pip install lightkube") from None
        log("warn", "Kubernetes API not used: the client library is missing (pip install lightkube)", error=str(exc))
        return None
    return KubernetesContext(client, node_name(config), spec, config.mapping_max_age_seconds,
                             watch_silence_seconds=config.kubernetes_watch_silence_seconds)


def start_and_wait(context: KubernetesContext, resolve_mig, wait_seconds: float, slices: bool = False) -> None:
    """Start the watches and wait up to `wait_seconds` for the first pod list (and ResourceSlice list,
    with `slices`), so that the first mapping already has the extra labels; an API that does not
    answer yet is retried in the background."""
    context.dra.resolve_mig = resolve_mig
    context.start()
    deadline = time.monotonic() + wait_seconds
    while not (context.up and (context.slice_watch.healthy or not slices)) and time.monotonic() < deadline:
        time.sleep(0.02)
    log("info", "Kubernetes API in use", node=context.node_name, pod_watch_up=context.up, pods=context.pod_count())
