"""`top`'s flags hold the design contract's names, choices and defaults; a bad one is one line and exit 2."""

from __future__ import annotations

import pytest

from exporter.top.options import PROMETHEUS_WINDOW_SECONDS, PROXY_WINDOW_SECONDS, build_parser, parse_options

PROG = "pod-gpu-metrics-exporter top"


def test_the_contracts_flags_and_choices():
    options = parse_options([], {}, PROG)
    assert (options.by, options.output, options.watch_seconds, options.prometheus_url) == ("pod", "table", None, None)
    assert options.window_seconds == PROXY_WINDOW_SECONDS
    help_text = " ".join(build_parser(PROG).format_help().split())
    for text in ("--prometheus URL", "POD_GPU_EXPORTER_PROMETHEUS_URL", "{table,json,csv}",
                 "{pod,namespace,queue,node,cluster}", "--watch SECONDS", "--window DURATION"):
        assert text in help_text, text


def test_the_prometheus_url_from_the_environment_and_its_window():
    options = parse_options([], {"POD_GPU_EXPORTER_PROMETHEUS_URL": "http://prometheus:9090"}, PROG)
    assert (options.prometheus_url, options.window_seconds) == ("http://prometheus:9090", PROMETHEUS_WINDOW_SECONDS)
    assert parse_options(["--prometheus", "http://p:9090", "--window", "5m"], {}, PROG).window_seconds == 300


@pytest.mark.parametrize("text, seconds", [("5", 5.0), ("2.5", 2.5), ("5s", 5.0), ("1m", 60.0)])
def test_watch_takes_seconds_or_a_duration(text, seconds):
    assert parse_options(["--watch", text], {}, PROG).watch_seconds == seconds


def test_kubeconfig_is_kubectls_list_and_an_explicit_file_alone(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    listed = f"{first}:{second}:{first}"
    assert parse_options([], {"KUBECONFIG": listed}, PROG).kubeconfigs == (str(first), str(second))
    assert parse_options(["--kubeconfig", str(second)], {"KUBECONFIG": str(first)}, PROG).kubeconfigs == (str(second),)


@pytest.mark.parametrize("args, environ", [
    (["--by", "pods"], {}), (["-o", "yaml"], {}), (["--window", "0s"], {}), (["--watch", "-1"], {}),
    (["--scrape.max-body-size", "lots"], {}), (["-l", "tier in (a)"], {}), (["--sort", "heat"], {}),
    ([], {"POD_GPU_EXPORTER_PROMETHEUS_URL": "prometheus:9090"}), (["--prometheus.password-file", "/nonexistent"], {}),
    # The pattern of a URL, but no port urlsplit can read: a traceback once the source asked for it.
    (["--prometheus", "http://h:99999"], {}), (["--prometheus", "http://h:9x"], {}), (["--prometheus", "http://h:0"], {}),
    ([], {"POD_GPU_EXPORTER_PROMETHEUS_URL": "http://h:99999"}),
    (["--context", "a", "--all-contexts"], {}), (["--cluster-label", "9cluster"], {}), (["--cluster", " "], {}),
    (["--prometheus.header", "X-Scope-OrgID team-a"], {}), (["--prometheus.header", "X: a\nb"], {}),
])
def test_a_bad_flag_is_one_line_and_exit_2(args, environ, capsys):
    with pytest.raises(SystemExit) as stopped:
        parse_options(args, environ, PROG)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{PROG}: error: ") and err.count("\n") == 1, err


def test_contexts_and_headers_repeat_and_the_cluster_flags():
    options = parse_options(["--context", "east", "--context", "west", "--context", "east",
                             "--prometheus.header", "X-Scope-OrgID: team-a", "--prometheus.header", "X-Extra:  b ",
                             "--cluster", "east", "--cluster-label", "k8s_cluster", "--by", "cluster"], {}, PROG)
    assert options.contexts == ("east", "west") and not options.all_contexts
    assert options.prometheus_headers == (("X-Scope-OrgID", "team-a"), ("X-Extra", "b"))
    assert (options.cluster, options.cluster_label, options.by) == ("east", "k8s_cluster", "cluster")
    assert parse_options(["--all-contexts"], {}, PROG).all_contexts
    assert parse_options([], {}, PROG).cluster_label == "cluster"
