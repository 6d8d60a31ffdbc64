"""The lightkube client: from a kubeconfig, or from the pod's service account, with its token re-read as it rotates."""

from __future__ import annotations

import os
from typing import Optional

from exporter.base.errors import ConfigError
from exporter.collectors.kubernetes.token import use_rotating_token

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


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
