#!/usr/bin/env bash
# Runs the whole test suite in a fresh venv on one dependency set:
#
#   bash .ci/suite.sh newest   # what `pip install .` gives users today (protobuf 7.x, ...)
#   bash .ci/suite.sh floors   # the oldest versions pyproject.toml allows (constraints/floors.txt)
#
# "newest" leaves out grpcio-tools: its pin (the generator of exporter/_gen) holds protobuf
# back to 5.x, which is not what users get; the generated-code test then skips. The test
# extra is read from pyproject.toml so this list never drifts from it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
set_name=${1:?usage: suite.sh newest|floors}
venv=${PGME_CI_VENVS:-/tmp/pgme-ci-venvs}/$set_name

test_requirements() {
    python3 - "$root/pyproject.toml" "$1" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    extra = tomllib.load(f)["project"]["optional-dependencies"]["test"]
skip = sys.argv[2].split(",") if sys.argv[2] else []
print("\n".join(r for r in extra if not any(r.startswith(s) for s in skip)))
PY
}

rm -rf "$venv"
python3 -m venv "$venv"
case "$set_name" in
    newest)
        mapfile -t requirements < <(test_requirements grpcio-tools)
        "$venv/bin/pip" install -q --upgrade --upgrade-strategy eager "$root" "${requirements[@]}"
        ;;
    floors)
        "$venv/bin/pip" install -q -c "$root/constraints/floors.txt" "$root[test]"
        ;;
    *)
        echo "suite.sh: unknown set $set_name (newest or floors)" >&2
        exit 2
        ;;
esac
echo "suite.sh: $set_name:" $("$venv/bin/pip" list --format=freeze 2>/dev/null \
    | grep -iE '^(grpcio|protobuf|prometheus.client|pyyaml|bcrypt|lightkube|nvidia.ml.py)==' | tr '\n' ' ')
cd "$root"
status=0
"$venv/bin/python" -m pytest -q -p no:cacheprovider || status=$?
if [[ $status -eq 5 ]]; then
    echo "suite.sh: pytest collected no tests: that is a failure" >&2
    exit 1
fi
exit "$status"
