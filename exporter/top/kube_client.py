"""The Kubernetes clients `top` asks: one per kubeconfig context (the files merged as kubectl merges
them), else the pod's service account."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from exporter.top.errors import TopSourceError
from exporter.top.kubeconfig import KubeconfigError, context_names, merged_kubeconfig


def load_kubeconfig(paths: Sequence[str]) -> Optional[Dict]:
    """The merged kubeconfig of `paths`; None where there is none and top runs in a pod (its service
    account); TopSourceError (exit 1) where neither is there."""
    from exporter.collectors.kubernetes.client import in_cluster

    try:
        config = merged_kubeconfig(paths) if paths else None
    except KubeconfigError as exc:
        raise TopSourceError(str(exc), "unreachable") from None
    if config and config["contexts"]:
        return config
    if in_cluster():
        return None
    shown = f"kubeconfig {', '.join(paths)} has no context" if paths else "no kubeconfig ($KUBECONFIG, ~/.kube/config)"
    raise TopSourceError(f"{shown} and not running in a cluster: give --kubeconfig, or --prometheus URL", "unreachable")


def contexts_to_read(config: Optional[Dict], asked: Sequence[str], every: bool, cluster: Optional[str]) -> List[str]:
    """The contexts named (all with --all-contexts; --cluster alone names one); [] for the current one."""
    if config is None:
        if asked or every or cluster:
            raise TopSourceError("--context, --all-contexts and --cluster need a kubeconfig (--kubeconfig, "
                                 "$KUBECONFIG); in a pod, top reads its own cluster", "unreachable")
        return []
    known = context_names(config)
    named = known if every else list(asked) if asked else [cluster] if cluster else []
    unknown = [name for name in named if name not in known]
    if unknown:
        raise TopSourceError(f"no context {unknown[0]!r} in the kubeconfig (its contexts: {', '.join(known)})",
                             "unreachable")
    if cluster and cluster not in named:
        raise TopSourceError(f"--cluster {cluster}: not one of the contexts read ({', '.join(named)})", "unreachable")
    return [cluster] if cluster else named


def make_top_client(config: Optional[Dict], context: Optional[str]):
    """A lightkube client for `context` (None: the current one); TopSourceError (exit 1) when it cannot be made."""
    from lightkube import Client, KubeConfig
    from lightkube import ConfigError as LightkubeConfigError

    from exporter.collectors.kubernetes.client import SERVICE_ACCOUNT_DIR

    try:
        loaded = KubeConfig.from_dict(config) if config else KubeConfig.from_service_account(SERVICE_ACCOUNT_DIR)
        return Client(loaded.get(context_name=context) if context else loaded, trust_env=False)
    except (LightkubeConfigError, OSError, KeyError, ValueError, TypeError) as exc:
        where = ("the kubeconfig" + (f" (context {context})" if context else "")) if config else \
            f"the service account in {SERVICE_ACCOUNT_DIR}"
        raise TopSourceError(f"cannot load {where}: {exc}", "unreachable") from None
