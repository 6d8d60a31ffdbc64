"""The Kubernetes source from its options: whether to use the API at all, the client, and the first lists awaited."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Optional

from exporter.base.errors import ConfigError
from exporter.base.logs import log
from exporter.core.device_ids import DeviceForms
from exporter.collectors.kubernetes.client import in_cluster, make_client
from exporter.collectors.kubernetes.options import KubernetesOptions

if TYPE_CHECKING:  # the context and its watches are imported only where the API is used
    from exporter.collectors.kubernetes.context import KubernetesContext
    from exporter.collectors.kubernetes.roles import KubernetesLifecycle


def node_name(options: KubernetesOptions) -> str:
    import socket

    return options.node_name or os.environ.get("NODE_NAME") or socket.gethostname()


def prepare_kubernetes(options: KubernetesOptions, forms: DeviceForms) -> Optional[KubernetesContext]:
    """A context (its three roles) ready to start, or None when --kubernetes.api rules it out; ConfigError for a bad config."""
    enabled = options.api == "on" or (options.api == "auto" and (options.kubeconfig is not None or in_cluster()))
    if not enabled:
        if options.labels.enabled:
            log("warn", "--labels.extra/--labels.pod-labels/--labels.pod-annotations need the Kubernetes API, which "
                "is off (--kubernetes.api); they are ignored", kubernetes_api=options.api)
        return None
    if options.kubeconfig is None and not in_cluster():
        raise ConfigError("--kubernetes.api on: not running in a pod (no KUBERNETES_SERVICE_HOST and service-account "
                          "token) and no --kubernetes.kubeconfig given")
    try:
        client = make_client(options.kubeconfig)
    except ImportError as exc:  # a dependency, but an install with --no-deps can lack it
        if options.api == "on":
            raise ConfigError(f"--kubernetes.api on: the client library is missing ({exc}): pip install lightkube") from None
        log("warn", "Kubernetes API not used: the client library is missing (pip install lightkube)", error=str(exc))
        return None
    from exporter.collectors.kubernetes.context import KubernetesContext

    return KubernetesContext(client, node_name(options), options.labels, forms, options.grace_seconds,
                             watch_silence_seconds=options.watch_silence_seconds)


def start_and_wait(lifecycle: KubernetesLifecycle, resolve_mig, wait_seconds: float, slices: bool = False) -> None:
    """Start the watches and wait up to `wait_seconds` for the first pod list (and ResourceSlice list,
    with `slices`), so that the first mapping already has the extra labels; an API that does not
    answer yet is retried in the background."""
    lifecycle.start(resolve_mig)
    deadline = time.monotonic() + wait_seconds
    while not (lifecycle.up and (lifecycle.slices_up or not slices)) and time.monotonic() < deadline:
        time.sleep(0.02)
    log("info", "Kubernetes API in use", node=lifecycle.node_name, pod_watch_up=lifecycle.up,
        slice_watch_up=lifecycle.slices_up)
