#!/usr/bin/env bash
# Fetches the pinned helm (and the kubectl beside it, for the `kubectl gpu top` plugin test) into
# the CI cache and prints helm's path on stdout; kubectl lies in the same folder. Everything else
# goes to stderr:
#
#   HELM=$(bash .ci/helm-setup.sh); KUBECTL=$(dirname "$HELM")/kubectl
#
# scripts/fetch_helm.py does the work and holds the pin (the tests fetch the same way on a
# developer's machine, into the user's cache folder); here the cache is CI's.
set -euo pipefail
cd "$(dirname "$0")/.."

helm=$(python3 scripts/fetch_helm.py --cache "${PGME_CI_CACHE:-/var/cache/pod-gpu-metrics-exporter-ci}/helm")
"$helm" version --short >&2
"$(dirname "$helm")/kubectl" version --client >&2
echo "$helm"
