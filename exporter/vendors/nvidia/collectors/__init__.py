"""NVIDIA's collectors: dcgm-exporter's reader, NVML's per-process shares and its XID events."""

# Why `demo` refuses an NVML collector's flags: its own --demo.nvml switches the simulated NVML.
DEMO_SETS_NVML = "the demo sets it with --demo.nvml: on simulates NVML and /proc for process mode, off serves devices only"
