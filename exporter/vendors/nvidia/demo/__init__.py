"""NVIDIA's simulated node for `demo`: dcgm-exporter from a real L4 scrape, NVML, its pods and their processes."""
