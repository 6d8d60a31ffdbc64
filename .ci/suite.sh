#!/usr/bin/env bash
# Runs the whole test suite in a fresh venv on one dependency set:
#
#   bash .ci/suite.sh floors   # the oldest versions pyproject.toml allows (constraints/floors.txt),
#                              # with the pinned generator of exporter/_gen (the codegen extra)
#   bash .ci/suite.sh newest   # the newest allowed versions, upgraded even where a venv has others
#
# .ci/run runs "floors"; the README's test command, which .ci/run runs first, already installs the
# newest versions into a fresh venv, so "newest" is for checking an existing machine by hand.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
set_name=${1:?usage: suite.sh floors|newest}
venv=${PGME_CI_VENVS:-/tmp/pgme-ci-venvs}/$set_name

rm -rf "$venv"
python3 -m venv "$venv"
case "$set_name" in
    floors)
        "$venv/bin/pip" install -q -c "$root/constraints/floors.txt" "$root[test,codegen]"
        ;;
    newest)
        "$venv/bin/pip" install -q --upgrade --upgrade-strategy eager "$root[test]"
        ;;
    *)
        echo "suite.sh: unknown set $set_name (floors or newest)" >&2
        exit 2
        ;;
esac
echo "suite.sh: $set_name:" $("$venv/bin/pip" list --format=freeze 2>/dev/null \
    | grep -iE '^(grpcio|grpcio.tools|protobuf|prometheus.client|pyyaml|bcrypt|lightkube|nvidia.ml.py)==' | tr '\n' ' ')
cd "$root"
status=0
"$venv/bin/python" -m pytest -q -p no:cacheprovider || status=$?
if [[ $status -eq 5 ]]; then
    echo "suite.sh: pytest collected no tests: that is a failure" >&2
    exit 1
fi
exit "$status"
