"""`top --watch` in a real terminal (tmux): each frame is drawn over the last, never below it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import uuid

import pytest

from support.exporter_process import REPO_ROOT, exporter_command, exporter_env
from support.fake_pod_proxy import PodProxyApi
from support.top_runs import EXPORTER_NAMESPACE, add_exporter_pod, kubeconfig_for
from support.waiting import wait_until

BODY = b"""# TYPE pod_gpu_exporter_dcgm_up gauge
pod_gpu_exporter_dcgm_up 1
pod_gpu_container_allocated_gpus{namespace="ml-team",pod="trainer-0",container="pytorch"} 2
pod_gpu_container_sm_utilization_ratio{UUID="GPU-0",gpu="0",namespace="ml-team",pod="trainer-0",container="pytorch"} 0.5
"""
_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is not installed (.ci/system-packages.sh installs it)")
        pytest.skip("tmux is not installed (apt-get install tmux)")
    server = f"pgx-top-{uuid.uuid4().hex[:8]}"

    def tmux_run(*args: str) -> str:
        run = subprocess.run(["tmux", "-L", server, *args], capture_output=True, text=True, timeout=10)
        assert run.returncode == 0, f"tmux {' '.join(args)}: {run.stderr}"
        return run.stdout
    yield tmux_run
    subprocess.run(["tmux", "-L", server, "kill-server"], capture_output=True, timeout=10)


def test_watch_redraws_in_place_and_ctrl_c_ends_it(tmux, tmp_path):
    api = PodProxyApi().start()
    try:
        add_exporter_pod(api, "pod-gpu-metrics-exporter-7xk2p", "gpu-node-1")
        api.serve_body(EXPORTER_NAMESPACE, "pod-gpu-metrics-exporter-7xk2p", "9400", BODY)
        command = exporter_command() + ["top", "--kubeconfig", kubeconfig_for(api, tmp_path), "--window", "200ms",
                                        "--watch", "1"]
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in exporter_env().items() if k in ("PYTHONPATH", "PATH", "HOME"))
        # The shell outlives the Ctrl+C sent to the pane's foreground group (a trap, which a child does not
        # inherit), to say how top ended.
        shell = (f"trap 'echo' INT; cd {shlex.quote(str(REPO_ROOT))} && env {env} {shlex.join(command)}; "
                 "echo EXIT=$?; sleep 60")
        tmux("new-session", "-d", "-x", "160", "-y", "30", "sh", "-c", shell)
        pane = lambda: tmux("capture-pane", "-p")  # noqa: E731 - the screen as it is now
        first = wait_until(lambda: _stamp(pane()), 30, 0.1, "the first frame")
        later = wait_until(lambda: (_stamp(pane()) or first) != first and pane(), 30, 0.1, "a redraw")
        screen = later.splitlines()
        assert screen[0].startswith("Every 1s: pod-gpu-metrics-exporter top"), later
        assert screen[2].split()[:3] == ["NAMESPACE", "POD", "CONTAINER"] and "trainer-0" in screen[3], later
        # Drawn over the last frame: the pane's scrollback holds one table, not one per redraw.
        everything = tmux("capture-pane", "-p", "-S", "-")
        assert everything.count("NAMESPACE") == 1 and everything.count("Every 1s") == 1, everything
        tmux("send-keys", "C-c")
        assert "EXIT=0" in wait_until(lambda: "EXIT=" in pane() and pane(), 15, 0.1, "top to end on Ctrl+C")
    finally:
        api.stop()


def _stamp(screen: str) -> str:
    match = _STAMP.search(screen)
    return match.group(0) if match else ""
