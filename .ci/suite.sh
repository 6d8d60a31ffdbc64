#!/usr/bin/env bash
# Runs the whole test suite in a fresh venv on one dependency set:
#
#   bash .ci/suite.sh floors   # the oldest versions pyproject.toml allows (constraints/floors.txt),
#                              # with the pinned generator of exporter/_gen (the codegen extra); the
#                              # tests of Python behaviour only (see the selection below)
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
# What the floors run checks is that the oldest Python libraries pyproject.toml allows still run the
# exporter, `top` and the demo: every unit test, every end-to-end test of the exporter's own behaviour,
# the generated code and the wheel. Tests whose subject lies outside Python — rule files, dashboards,
# the chart and the docs checked with Prometheus, promtool, helm and VictoriaMetrics, and the benchmarks'
# printed figures — run the same Python paths as the newest run and depend on those tools' versions, so
# they run once, in the README's run (about half of the suite's time).
selection=()
if [[ $set_name == floors ]]; then
    selection=(tests/unit tests/e2e tests/artifacts/test_generated_code.py tests/artifacts/test_packaging.py)
    for module in autoscaling_demo_e2e autoscaling_e2e autoscaling_keda_e2e dashboard_on_demo_e2e \
            demo_prometheus_e2e health_rules_e2e mig_power_rules_e2e workload_rules_e2e many_clusters_e2e \
            multi_cluster_recipe_e2e opencost_queries_e2e process_shares_prometheus_e2e \
            top_clusters_prometheus_e2e top_mixed_fleet_e2e top_prometheus_e2e top_young_series_e2e \
            top_utilization_e2e top_kubectl_plugin benchmark_smoke top_benchmark_smoke load_smoke \
            process_shares_benchmark amd_demo_prometheus_e2e mixed_fleet_demos_e2e pod_numbers_e2e; do
        [[ -f tests/e2e/test_$module.py ]] || { echo "suite.sh: tests/e2e/test_$module.py is gone: update the floors selection" >&2; exit 1; }
        selection+=(--ignore "tests/e2e/test_$module.py")
    done
fi
status=0
"$venv/bin/python" -m pytest -q -p no:cacheprovider "${selection[@]}" || status=$?
if [[ $status -eq 5 ]]; then
    echo "suite.sh: pytest collected no tests: that is a failure" >&2
    exit 1
fi
exit "$status"
