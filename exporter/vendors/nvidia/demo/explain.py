"""What NVIDIA's demo node tells of itself once it answers: its GPUs, holders and queries worth pasting into Prometheus."""

from __future__ import annotations

from exporter.demo.cluster import CLUSTER_QUEUE, KAI_PARENT_QUEUE, KAI_QUEUE, LOCAL_QUEUE
from exporter.vendors.nvidia.demo.nvml import LOST_AFTER_SECONDS, XID_FALLEN_OFF_THE_BUS
from exporter.vendors.nvidia.demo.workload import DRA_GPU, DRA_TAINT, HPC_JOBS, UNHEALTHY_GPU

# Three questions the per-process series answer and device-level metrics cannot.
QUERIES = (
    ("each pod's own share of its GPUs' SM time (0-1 per GPU)",
     "sum by (namespace, pod) (pod_gpu_container_sm_utilization_ratio)"),
    ("each pod's power draw in watts, from its share of the boards' energy",
     "sum by (namespace, pod) (rate(pod_gpu_container_energy_joules_total[5m]))"),
    ("GPUs held but left idle most of the last 5 minutes",
     "rate(pod_gpu_container_idle_seconds_total[5m]) > 0.5"),
)


def simulated_text(url: str, dcgm_url: str, nvml: bool = True) -> str:
    """The banner's lines after the kubelet's: dcgm-exporter, the GPUs and who holds them, and (with NVML)
    queries worth pasting once Prometheus scrapes `url`."""
    return f"""\
           dcgm-exporter at {dcgm_url}, serving 4 NVIDIA L4 GPUs from a real scrape, values moving,
           a Kubernetes API server{_NVML_PARTS if nvml else ""}:
  GPU 0, 1  ml-team/trainer-0/pytorch                       (nvidia.com/gpu, whole GPUs;
            its pod status reports GPU {UNHEALTHY_GPU} Unhealthy; queued through Kueue: LocalQueue
            {LOCAL_QUEUE}, ClusterQueue {CLUSTER_QUEUE}, the cluster_queue and local_queue labels)
  GPU 2     inference/llm-server-a + inference/llm-server-b  (nvidia.com/gpu.shared, time-sliced;
            llm-server-a holds two replicas and still gets one series per sample; its Deployment names
            the KAI Scheduler Queue {KAI_QUEUE}, a leaf under {KAI_PARENT_QUEUE}{_GPU2_PROCESSES if nvml else ")"}
  GPU 3     idle: its samples pass unchanged, without owner labels; NVIDIA's DRA driver publishes
            it in a ResourceSlice, tainted {DRA_TAINT["key"]} (pod_gpu_device_taint); {_HPC_JOB}{_LOST if nvml else ""}{_NOTEBOOK if nvml else ""}
{_QUERIES_TEXT.format(url=url) if nvml else _WITHOUT_NVML}
"""


_NVML_PARTS = (", and NVML's per-process view of the GPUs with the host's /proc\n"
               "           (so it serves --sharing.mode process; --demo.nvml off leaves that out)")
_GPU2_PROCESSES = (";\n            llm-server-b holds its replica but runs nothing on it; a host service uses GPU 2 too,\n"
                   "            and it reports an XID now and then)")
_HPC_JOB = (f"Slurm\n            job {', '.join(HPC_JOBS[DRA_GPU])} is given it, as its file in the demo's job-mapping folder "
            "says (pod_gpu_hpc_job_info)")
_LOST = (f";\n            about {LOST_AFTER_SECONDS:g} s in it falls off the bus (XID {XID_FALLEN_OFF_THE_BUS}) and NVML "
         "reports it lost (pod_gpu_device_lost)")
_NOTEBOOK = "\n  research/notebook-7 holds no GPU, yet its process runs on GPU 0"
_QUERIES_TEXT = "\nWorth pasting into Prometheus once it scrapes {url}:\n" + "\n".join(
    f"  # {what}\n  {query}" for what, query in QUERIES) + "\n"
_WITHOUT_NVML = "\n(--demo.nvml off: no per-process shares, energy split or XIDs)\n"
