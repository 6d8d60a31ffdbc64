"""The Kubernetes client `top` asks: from a kubeconfig (and context), else the pod's service account."""

from __future__ import annotations

from typing import Optional

from exporter.top.errors import TopSourceError


def make_top_client(kubeconfig: Optional[str], context: Optional[str]):
    """A lightkube client; TopSourceError (exit 1) when no configuration can be loaded."""
    from lightkube import Client, KubeConfig
    from lightkube import ConfigError as LightkubeConfigError

    from exporter.sources.kubernetes.client import SERVICE_ACCOUNT_DIR, in_cluster

    if not kubeconfig and not in_cluster():
        raise TopSourceError("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a cluster: give "
                             "--kubeconfig, or --prometheus URL", "unreachable")
    try:
        config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_service_account(SERVICE_ACCOUNT_DIR)
        return Client(config.get(context_name=context) if context else config, trust_env=False)
    except (LightkubeConfigError, OSError, KeyError, ValueError) as exc:
        where = f"kubeconfig {kubeconfig}" + (f" (context {context})" if context else "") if kubeconfig else \
            f"the service account in {SERVICE_ACCOUNT_DIR}"
        raise TopSourceError(f"cannot load {where}: {exc}", "unreachable") from None
