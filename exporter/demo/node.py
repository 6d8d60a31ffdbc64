"""`demo`: a whole simulated GPU node of the vendor --gpu.vendor names: a gRPC kubelet and an API server shared by
every vendor, and the vendor's own simulated node (its exporter, its driver), served exactly as production would."""

from __future__ import annotations

import dataclasses
import functools
import shlex
import shutil
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Sequence

from exporter.collectors.registry import Registry, vendor_for
from exporter.config import Config
from exporter.demo.cluster import start_api_server
from exporter.demo.explain import explain
from exporter.demo.fake_kubelet import FakeKubelet
from exporter.demo.simulated_node import SimulatedNode


def run_demo(config: Config, serve: Callable[..., int]) -> int:
    """Start the simulated node, then serve it exactly as production would."""
    vendor = vendor_for(config.gpu_vendor)
    if vendor.demo_node is None:
        print(f"pod-gpu-metrics-exporter: error: `demo` has no simulated node for --gpu.vendor {vendor.name}",
              file=sys.stderr)
        return 2
    node: SimulatedNode = vendor.demo_node()
    workdir = Path(tempfile.mkdtemp(prefix="pod-gpu-demo-"))
    socket_path = str(workdir / "kubelet.sock")
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, ignore_errors=True)
        kubelet = FakeKubelet(socket_path)
        kubelet.set_devices(node.allocations())
        kubelet.set_allocatable(node.offered())
        kubelet.start()
        stack.callback(kubelet.stop)
        api = start_api_server(workdir / "kubeconfig", node.cluster)
        stack.callback(api.stop)
        serving = node.start(workdir, api, config, stack)
        # parse_config has refused --kubelet.socket, the upstream's flags, --kubernetes.*, --sharing.* and the
        # other flags the simulation sets for the demo, so nothing the user asked for is overridden here; its
        # short refresh interval is a default there, which --kubelet.refresh-interval replaces. --labels.extra
        # is added to.
        demo_config = dataclasses.replace(
            config, command="serve", gpu_vendor=vendor.name, kubelet_socket=socket_path,
            kubernetes_api="on", kubernetes_kubeconfig=str(workdir / "kubeconfig"),
            kubernetes_node_name=node.cluster.node_name, labels_extra=demo_labels_extra(config.labels_extra),
            **serving.settings)
        program = _invoked_as()
        ready = functools.partial(_announce, socket_path=socket_path, simulated=serving.simulated,
                                  mapping=mapping_command(program, socket_path, serving.mapping_flags), top=program)
        # The simulation reaches every collector that reads the vendor's driver through the registry's
        # driver binding, which a real node leaves at the driver's library.
        return serve(demo_config, on_ready=ready, registry=Registry(demo_config, driver=serving.driver))


def _announce(url: str, socket_path: str, simulated: Callable[[str], str], mapping: str, top: str) -> None:
    explain(url, socket_path, simulated(url), mapping, top=top)


def demo_labels_extra(asked: str) -> str:
    """--labels.extra as the demo serves it: what the user asked for (workload, pod_uid, from its API server's
    pods and their owners), and always queue: a pod queued through Kueue is among every vendor's, so its samples
    carry cluster_queue and local_queue."""
    chosen = [part.strip() for part in asked.split(",") if part.strip()]
    return ",".join(chosen + ([] if "queue" in chosen else ["queue"]))


def mapping_command(program: str, socket_path: str, extra: Sequence[str] = ()) -> str:
    """The command that prints the simulated node's GPU -> pod table, ready to paste (`extra`: the flags the
    vendor's node needs besides the socket)."""
    return " ".join([f"{program} mapping --kubelet.socket {shlex.quote(socket_path)}",
                     *(shlex.quote(part) for part in extra)])


def _invoked_as() -> str:
    """This process's command as typed (`.venv/bin/pod-gpu-metrics-exporter`, `python -m exporter`)."""
    program = sys.argv[0] if sys.argv and sys.argv[0] else "pod-gpu-metrics-exporter"
    if Path(program).name == "__main__.py":  # python -m exporter: argv[0] is the module's file
        return f"{shlex.quote(sys.executable)} -m exporter"
    return shlex.quote(program)
