"""pod-gpu-metrics-exporter: NVIDIA dcgm-exporter metrics labelled with the pod that holds each GPU."""

__version__ = "0.1.0"
