"""NVIDIA's collectors: dcgm-exporter's reader, NVML's per-process shares and its XID events."""
