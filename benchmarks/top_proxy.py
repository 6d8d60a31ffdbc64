"""What `top` costs through the pod proxy on a large cluster: time, requests in flight, memory, and its bounds held.

Run from the repository root: `python benchmarks/top_proxy.py [--nodes 1000] [--stalled 20]`.
Real but the cluster: the demo's exporter is scraped once for a real /gpu/metrics answer; a fake API
server (tests/support/fake_pod_proxy.py) lists `--nodes` exporter pods and answers each one's pod
proxy route with that body, except `--stalled` pods whose proxy never answers; the real `top`
command runs against it through a kubeconfig. It prints the figures, then checks the bounds: at most
--scrape.concurrency scrapes in flight, every stalled node named, the whole run within two rounds'
time limit plus the window. Exit 1 when a bound does not hold.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "tests"))
from support.exporter_process import exporter_command, exporter_env, start_exporter  # noqa: E402
from support.fake_pod_proxy import PodProxyApi  # noqa: E402
from support.top_runs import EXPORTER_NAMESPACE, add_exporter_pod  # noqa: E402
from support.fake_kube_api import write_kubeconfig  # noqa: E402


_PEAK_RSS = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)")


def demo_body() -> bytes:
    demo = start_exporter(["demo"])
    try:
        time.sleep(3)  # its first per-process refresh: the answer with every family in it
        return requests.get(demo.url(), timeout=10).content
    finally:
        demo.stop()


def fill(api: PodProxyApi, nodes: int, stalled: int, body: bytes) -> None:
    for index in range(nodes):
        name = f"pod-gpu-metrics-exporter-{index:05d}"
        add_exporter_pod(api, name, f"gpu-node-{index:05d}")
        if index < stalled:
            api.stall(EXPORTER_NAMESPACE, name, "9400")
        else:
            api.serve_body(EXPORTER_NAMESPACE, name, "9400", body)


def run(args) -> int:
    body = demo_body()
    api = PodProxyApi()
    api.stall_seconds = args.scrape_timeout * 4
    api.start()
    fill(api, args.nodes, args.stalled, body)
    with tempfile.TemporaryDirectory() as folder:
        kubeconfig = write_kubeconfig(str(Path(folder) / "kubeconfig"), api.url)
        command = exporter_command() + ["top", "--kubeconfig", kubeconfig, "-o", "json", "--window", f"{args.window}s",
                                        "--scrape.timeout", f"{args.scrape_timeout}s",
                                        "--scrape.concurrency", str(args.concurrency)]
        started = time.monotonic()
        # Through a wrapper that reports its one child's peak RSS (this process ran the demo as well).
        done = subprocess.run([sys.executable, "-c", _PEAK_RSS] + command, env=exporter_env(), capture_output=True,
                              text=True, timeout=600)
        seconds = time.monotonic() - started
    api.stop()
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        return 1
    document = json.loads(done.stdout)
    peak_kib = int(done.stderr.strip().splitlines()[-1])
    bound = 2 * (-(-args.stalled // args.concurrency) * args.scrape_timeout) + args.window + 30
    print(f"== {args.nodes} nodes through the pod proxy, {args.stalled} never answering, "
          f"{len(body) / 1024:.0f} KiB per answer")
    print(f"wall time: {seconds:.1f} s (window {args.window:g} s, scrape timeout {args.scrape_timeout:g} s)")
    print(f"proxied requests: {api.proxied} (2 per node)")
    print(f"most in flight: {api.most_in_flight} (--scrape.concurrency {args.concurrency})")
    print(f"rows: {len(document['rows'])}, nodes not answering: {len(document['unreachable'])}")
    print(f"peak RSS of top: {peak_kib / 1024:.1f} MiB")
    held = {"concurrency": api.most_in_flight <= args.concurrency,
            "every stalled node named": len(document["unreachable"]) == args.stalled,
            f"time under {bound:g} s": seconds < bound}
    for name, ok in held.items():
        print(f"bound {name}: {'held' if ok else 'BROKEN'}")
    return 0 if all(held.values()) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--stalled", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--scrape-timeout", type=float, default=2.0)
    parser.add_argument("--window", type=float, default=1.0)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
