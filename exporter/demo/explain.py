"""What the demo prints once it answers: where to look, what its vendor's node simulates, and Prometheus and `top` on it."""

from __future__ import annotations

from urllib.parse import urlsplit


def explain(url: str, socket_path: str, simulated: str, mapping: str, top: str = "") -> None:
    """`simulated`: the vendor's node telling what it runs, the lines after the kubelet's (each indented, the
    last ending in a newline)."""
    parts = urlsplit(url)
    root = f"{parts.scheme}://{parts.netloc}"
    print(f"""
pod-gpu-metrics-exporter demo: a simulated GPU node, no cluster needed.

  Open {url}
  (also {root}/ for the node page, {root}/metrics for the exporter's own metrics)

Simulated: a kubelet PodResources gRPC server on {socket_path},
{simulated}The table the exporter works from, as `mapping` prints it on a real node; from another terminal:
  {mapping}
{_prometheus_lines(parts.netloc, top) if top else ""}Press Ctrl+C to stop.
""", flush=True)


# The Prometheus the checkout ships for the demo (README.md, docs/top.md): it scrapes DEMO_TARGET and loads
# every rule file, and listens where Prometheus does by default.
PROMETHEUS_COMMAND = "prometheus --config.file=prometheus/demo/prometheus.yml"
DEMO_TARGET = "127.0.0.1:9400"
PROMETHEUS_URL = "http://127.0.0.1:9090"
# Debian's prometheus package runs a service holding port 9090 and the package's default data folder.
DEBIAN_FLAGS = "--storage.tsdb.path=data --web.listen-address=127.0.0.1:9091"


def _prometheus_lines(listening: str, program: str) -> str:
    """How to put a Prometheus in front of the demo, and `top` on it; a demo listening elsewhere is told what
    to change, since the shipped config scrapes DEMO_TARGET."""
    moved = "" if listening == DEMO_TARGET else f" (change its target {DEMO_TARGET} to {listening})"
    return (f"A Prometheus for it, with every rule the project ships, from a clone of the repository{moved}:\n"
            f"  {PROMETHEUS_COMMAND}\n"
            f"  (Debian's package: add {DEBIAN_FLAGS} and use port 9091 below)\n"
            f"then who uses what, per container (also `kubectl gpu top`):\n"
            f"  {program} top --prometheus {PROMETHEUS_URL} --window 1m\n")
