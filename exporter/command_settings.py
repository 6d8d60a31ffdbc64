"""Which settings each command refuses because it would not use them: a user who passes one expects it to act."""

from __future__ import annotations

from typing import Mapping

from exporter.base.errors import ConfigError

ENV_PREFIX = "POD_GPU_EXPORTER_"

_OWN_KUBELET = "the demo runs its own simulated kubelet; leave out `demo` to serve a real node"
_OWN_DCGM = "the demo runs its own simulated dcgm-exporter; leave out `demo` to serve a real node"
_NO_API = "the demo runs its own simulated API server for its simulated pods"
_OWN_EXTRA_LABELS = "the demo adds the queue labels of its simulated pods itself"
_OWN_HPC_JOBS = "the demo writes its own job-mapping folder, for its simulated Slurm job, and removes it at exit"
_MAPPING_ONLY = "it only shapes the output of `mapping`"
_DEMO_ONLY = "only `demo` simulates NVML"
_SIMULATED_NVML = "the demo sets it with --demo.nvml: on simulates NVML and /proc for process mode, off serves devices only"
_UNUSED_BY = {
    "demo": {"kubelet_socket": _OWN_KUBELET, "dcgm_url": _OWN_DCGM, "dcgm_file": _OWN_DCGM,
             **dict.fromkeys(("kubernetes_api", "kubernetes_kubeconfig", "kubernetes_node_name",
                              "kubernetes_watch_silence_seconds", "labels_pod_labels", "labels_pod_annotations"), _NO_API),
             "labels_extra": _OWN_EXTRA_LABELS, "hpc_job_mapping_dir": _OWN_HPC_JOBS,
             **dict.fromkeys(("sharing_mode", "sharing_proc_root", "health_xid_events"), _SIMULATED_NVML),
             "output": _MAPPING_ONLY},
    "serve": {"output": _MAPPING_ONLY, "demo_nvml": _DEMO_ONLY},
    # `mapping` asks the kubelet (and the API server, for its labels column) once and prints.
    "mapping": {
        **dict.fromkeys(("listen_address", "telemetry_path", "web_config_file"), "it prints one table and exits, serving nothing"),
        **dict.fromkeys(("dcgm_url", "dcgm_file", "dcgm_timeout_seconds", "dcgm_max_body_bytes"),
                        "it reads the kubelet, never dcgm-exporter"),
        **dict.fromkeys(("kubelet_refresh_interval_seconds", "mapping_max_age_seconds"), "it asks the kubelet once"),
        "kubernetes_watch_silence_seconds": "it lists the API server once, keeping no watch open",
        **dict.fromkeys(("labels_style", "labels_mode", "labels_limit"), "it prints owners as columns, not as sample labels"),
        **dict.fromkeys(("sharing_mode", "sharing_proc_root", "energy_idle_policy"),
                        "per-process shares are served, never printed by it"),
        "hpc_job_mapping_dir": "HPC jobs are served as pod_gpu_hpc_job_info, never printed by it",
        "demo_nvml": _DEMO_ONLY,
        "health_xid_events": "XID events are counted while serving, never printed by it",
    },
}

def refuse_unused_settings(command: str, sources: Mapping[str, str]) -> None:
    """A ConfigError naming the first setting given (a flag, or its variable) that `command` would not use."""
    for field, why in _UNUSED_BY.get(command, {}).items():
        # `kubectl exec` into a serving container runs `mapping` with that container's environment:
        # its serving variables are the deployment's configuration, not a mistake, so only flags
        # given to `mapping` itself are refused.
        from_environment = sources.get(field, "").startswith(ENV_PREFIX)
        if field in sources and not (command == "mapping" and from_environment):
            raise ConfigError(f"{sources[field]} is not used by `{command}` ({why}): drop it")
