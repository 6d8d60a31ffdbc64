"""Sources: each talks to one outside system (kubelet, Kubernetes API, NVML, /proc, dcgm-exporter) and knows no other."""
