"""Flags, environment variables and their validation."""

from __future__ import annotations

import re

import pytest

from exporter.base.errors import ConfigError
from exporter.collectors.kubernetes.collector import KubernetesCollector
from exporter.config import Config, build_parser, env_var_name, parse_config, parse_duration, parse_listen_address
from exporter.vendors.nvidia.collectors.dcgm import DcgmCollector
from support.design_flags import DESIGN_FLAGS


def test_defaults_match_the_design():
    config = parse_config([], {})
    assert config == Config()
    assert config.listen_address == ":9400"
    assert (config.telemetry_path, config.dcgm_url) == ("/gpu/metrics", "http://127.0.0.1:9401/metrics")
    assert config.kubelet_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert (config.dcgm_timeout_seconds, config.kubelet_refresh_interval_seconds, config.kubelet_timeout_seconds) == (5, 5, 5)
    assert (config.labels_style, config.log_level, config.log_format) == ("kubernetes", "info", "logfmt")


@pytest.mark.parametrize("flag", DESIGN_FLAGS)
def test_every_flag_has_its_environment_variable(flag):
    assert env_var_name(flag).startswith("POD_GPU_EXPORTER_")
    assert "." not in env_var_name(flag) and "-" not in env_var_name(flag)


def test_environment_sets_and_flag_wins():
    env = {"POD_GPU_EXPORTER_DCGM_URL": "http://10.0.0.1:9401/metrics", "POD_GPU_EXPORTER_LABELS_STYLE": "legacy",
           "POD_GPU_EXPORTER_KUBELET_REFRESH_INTERVAL": "1m30s"}
    config = parse_config(["--labels.style", "kubernetes"], env)
    assert config.dcgm_url == "http://10.0.0.1:9401/metrics"
    assert config.labels_style == "kubernetes"
    assert config.kubelet_refresh_interval_seconds == 90


@pytest.mark.parametrize(
    "argv, env, named",
    [
        (["--dcgm.timeout", "5x"], {}, "--dcgm.timeout"),
        (["--dcgm.timeout", "0s"], {}, "--dcgm.timeout"),
        (["--dcgm.file", "/run/dcgm.prom", "--dcgm.timeout", "500ms"], {}, "--dcgm.timeout"),
        (["--dcgm.file", "/run/dcgm.prom"], {"POD_GPU_EXPORTER_DCGM_TIMEOUT": "900ms"}, "POD_GPU_EXPORTER_DCGM_TIMEOUT"),
        (["--web.listen-address", "9400"], {}, "--web.listen-address"),
        (["--web.listen-address", "::1:9400"], {}, "--web.listen-address"),
        (["--web.telemetry-path", "metrics"], {}, "--web.telemetry-path"),
        (["--web.telemetry-path", "/healthz"], {}, "--web.telemetry-path"),
        (["--web.telemetry-path", "/metrics"], {}, "--web.telemetry-path"),
        (["--web.telemetry-path", "/"], {}, "--web.telemetry-path"),
        (["--dcgm.url", "localhost:9401"], {}, "--dcgm.url"),
        (["--dcgm.max-body-size", "0"], {}, "--dcgm.max-body-size"),
        ([], {"POD_GPU_EXPORTER_LABELS_STYLE": "k8s"}, "POD_GPU_EXPORTER_LABELS_STYLE"),
        ([], {"POD_GPU_EXPORTER_KUBELET_TIMEOUT": ""}, "POD_GPU_EXPORTER_KUBELET_TIMEOUT"),
    ],
)
def test_bad_values_name_the_flag_or_variable(argv, env, named):
    with pytest.raises(ConfigError) as error:
        parse_config(argv, env)
    assert str(error.value).startswith(named + ":")
    assert "\n" not in str(error.value)


def test_a_short_dcgm_timeout_is_fine_over_http_and_from_the_settle_window_up_with_a_textfile():
    assert parse_config(["--dcgm.timeout", "500ms"], {}).dcgm_timeout_seconds == 0.5
    assert parse_config(["--dcgm.file", "/run/dcgm.prom", "--dcgm.timeout", "1s"], {}).dcgm_timeout_seconds == 1


def test_unknown_flag_exits_2_with_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(["--no-such-flag"], {})
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


@pytest.mark.parametrize("text, seconds", [("500ms", 0.5), ("5s", 5), ("1m", 60), ("1m30s", 90), ("2h", 7200), ("1.5s", 1.5)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "s", "5 s", "-1s", "1d"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    "text, expected",
    [(":9400", ("", 9400)), ("0.0.0.0:9400", ("0.0.0.0", 9400)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9400", ("::1", 9400))],
)
def test_listen_addresses(text, expected):
    assert parse_listen_address(text) == expected


def test_subcommands_and_output():
    assert parse_config(["demo"], {}).command == "demo"
    assert parse_config(["mapping", "-o", "json"], {}).output == "json"
    assert parse_config(["--labels.style", "legacy", "demo"], {}).command == "demo"


def test_kubernetes_flags_defaults_and_environment():
    config = parse_config([], {})
    assert (config.kubernetes_api, config.kubernetes_kubeconfig, config.kubernetes_node_name) == ("auto", None, None)
    assert (config.labels_extra, config.labels_pod_labels, config.labels_pod_annotations) == ("", None, None)
    env = {"POD_GPU_EXPORTER_KUBERNETES_API": "off", "POD_GPU_EXPORTER_LABELS_EXTRA": "workload",
           "POD_GPU_EXPORTER_LABELS_POD_LABELS": "team|app", "POD_GPU_EXPORTER_KUBERNETES_NODE_NAME": "n1"}
    config = parse_config(["--labels.extra", "pod_uid,workload"], env)
    assert (config.kubernetes_api, config.labels_extra, config.labels_pod_labels, config.kubernetes_node_name) == (
        "off", "pod_uid,workload", "team|app", "n1")


@pytest.mark.parametrize("env, message", [
    ({"POD_GPU_EXPORTER_LABELS_EXTRA": "pod_uid,node"}, "POD_GPU_EXPORTER_LABELS_EXTRA: unknown extra label 'node'"),
    ({"POD_GPU_EXPORTER_LABELS_POD_ANNOTATIONS": "*"}, "POD_GPU_EXPORTER_LABELS_POD_ANNOTATIONS: invalid regular"),
    ({"POD_GPU_EXPORTER_KUBERNETES_API": "yes"}, "POD_GPU_EXPORTER_KUBERNETES_API: invalid choice 'yes'"),
])
def test_bad_kubernetes_settings_name_the_variable(env, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_config([], env)


def test_sharing_flags_and_their_environment_variables(tmp_path):
    assert (Config().sharing_mode, Config().sharing_proc_root) == ("device", "/proc")
    host_proc = str(tmp_path)  # the host's /proc mounted elsewhere: a folder that exists
    config = parse_config(["--sharing.mode", "process", "--sharing.proc-root", host_proc], {})
    assert (config.sharing_mode, config.sharing_proc_root) == ("process", host_proc)
    environ = {"POD_GPU_EXPORTER_SHARING_MODE": "process", "POD_GPU_EXPORTER_SHARING_PROC_ROOT": host_proc}
    assert parse_config([], environ).sharing_proc_root == host_proc
    assert parse_config(["--sharing.mode", "device"], environ).sharing_mode == "device"  # the flag wins


@pytest.mark.parametrize("command", ["serve"])
def test_a_proc_root_that_is_no_folder_is_refused_where_it_is_read(command, tmp_path):
    missing = str(tmp_path / "none")
    says = (f"--sharing.proc-root: {missing} is not a directory (mount the host's /proc there read-only, "
            "or run with hostPID: true and keep /proc)")
    with pytest.raises(ConfigError, match=f"^{re.escape(says)}$"):
        parse_config([command, "--sharing.mode", "process", "--sharing.proc-root", missing], {})
    with pytest.raises(ConfigError, match=f"^{re.escape(says)}$"):
        parse_config([command], {"POD_GPU_EXPORTER_SHARING_MODE": "process", "POD_GPU_EXPORTER_SHARING_PROC_ROOT": missing})


def test_a_proc_root_is_not_checked_where_it_is_not_read(tmp_path):
    missing = str(tmp_path / "none")
    assert parse_config(["--sharing.proc-root", missing], {}).sharing_proc_root == missing  # device mode
    environ = {"POD_GPU_EXPORTER_SHARING_MODE": "process", "POD_GPU_EXPORTER_SHARING_PROC_ROOT": missing}
    assert parse_config(["mapping"], environ).command == "mapping"  # a serving container's environment


def test_energy_idle_policy_flag_and_its_environment_variable():
    assert Config().energy_idle_policy == "split"
    assert parse_config(["--energy.idle-policy", "unattributed"], {}).energy_idle_policy == "unattributed"
    environ = {"POD_GPU_EXPORTER_ENERGY_IDLE_POLICY": "unattributed"}
    assert parse_config([], environ).energy_idle_policy == "unattributed"
    assert parse_config(["--energy.idle-policy", "split"], environ).energy_idle_policy == "split"  # the flag wins
    with pytest.raises(ConfigError, match=re.escape("POD_GPU_EXPORTER_ENERGY_IDLE_POLICY: invalid choice 'even'")):
        parse_config([], {"POD_GPU_EXPORTER_ENERGY_IDLE_POLICY": "even"})


def test_the_configs_idle_policies_are_the_energy_splits():
    from exporter.vendors.nvidia.shares.energy import IDLE_POLICIES

    assert Config().energy_idle_policy == IDLE_POLICIES[0]
    for policy in IDLE_POLICIES:
        assert parse_config(["--energy.idle-policy", policy], {}).energy_idle_policy == policy


def test_each_choice_list_is_the_one_its_layer_uses():
    from exporter.base.logs import LOG_FORMATS, LOG_LEVELS
    from exporter.exposition.labels import LABEL_STYLES
    from exporter.exposition.series import LABEL_MODES
    from exporter.vendors.nvidia.shares.energy import IDLE_POLICIES

    text = " ".join(build_parser().format_help().split())
    for flag, choices in (("--labels.style", tuple(LABEL_STYLES)), ("--labels.mode", LABEL_MODES),
                          ("--energy.idle-policy", IDLE_POLICIES), ("--log.level", LOG_LEVELS),
                          ("--log.format", LOG_FORMATS)):
        assert f"{flag} {{{','.join(choices)}}}" in text
    defaults = Config()
    assert (defaults.labels_style, defaults.labels_mode) == (tuple(LABEL_STYLES)[0], LABEL_MODES[0])


@pytest.mark.parametrize("url", ["127.0.0.1:9401/metrics", "unix:///run/dcgm.sock", ""])
def test_a_dcgm_url_without_http_scheme_is_a_config_error(url):
    with pytest.raises(ConfigError, match="^--dcgm.url: expected an http:// or https:// URL"):
        parse_config(["--dcgm.url", url], {})


@pytest.mark.parametrize("url, says", [
    ("http://:9401/metrics", "--dcgm.url 'http://:9401/metrics' names no host"),
    ("http://u:secret@127.0.0.1:99999/metrics", "--dcgm.url 'http://u:***@127.0.0.1:99999/metrics' has an invalid port"),
])
def test_a_dcgm_url_without_a_host_or_with_a_bad_port_is_a_config_error(url, says):
    with pytest.raises(ConfigError, match=f"^{re.escape(says)}"):
        parse_config(["--dcgm.url", url], {})


def test_a_dcgm_url_host_and_port_are_checked_only_where_they_are_fetched_from():
    # `mapping` run in a serving container keeps its environment; a textfile replaces the URL.
    bad = {"POD_GPU_EXPORTER_DCGM_URL": "http://:9401/metrics"}
    assert parse_config(["mapping"], bad).command == "mapping"
    assert parse_config(["--dcgm.file", "/run/dcgm.prom"], bad).dcgm_file == "/run/dcgm.prom"


def test_the_dcgm_url_reaches_the_source_in_parts():
    config = parse_config(["--dcgm.url", "https://scraper:p%40ss@dcgm.example:9401/metrics?x=1"], {})
    endpoint = dcgm_endpoint(config)
    assert (endpoint.scheme, endpoint.host, endpoint.port, endpoint.path) == ("https", "dcgm.example", 9401, "/metrics?x=1")
    assert endpoint.credentials == ("scraper", "p@ss")
    assert endpoint.shown == "https://scraper:***@dcgm.example:9401/metrics?x=1" and "p@ss" not in repr(endpoint)
    assert (dcgm_endpoint(Config()).host, dcgm_endpoint(Config()).port, dcgm_endpoint(Config()).path) == ("127.0.0.1", 9401, "/metrics")


@pytest.mark.parametrize("args, says", [
    (["--energy.idle-policy", "even"], "--energy.idle-policy: invalid choice 'even' (choose from split, unattributed)"),
    (["--sharing.mode", "pod"], "--sharing.mode: invalid choice 'pod' (choose from device, process)"),
    (["--sharing.proc-root", "host/proc"], "--sharing.proc-root: path must start with '/'"),
])
def test_bad_sharing_flags(args, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_config(args, {})


@pytest.mark.parametrize("argv, env, named", [
    (["--web.listen-address", ":9400"], {}, "--web.listen-address"),
    (["--web.telemetry-path", "/gpu"], {}, "--web.telemetry-path"),
    (["--dcgm.max-body-size", "4MiB"], {}, "--dcgm.max-body-size"),
    (["--kubelet.refresh-interval", "1s"], {}, "--kubelet.refresh-interval"),
    (["--labels.style", "legacy"], {}, "--labels.style"),
])
def test_mapping_refuses_settings_only_serving_uses(argv, env, named):
    with pytest.raises(ConfigError, match=f"^{re.escape(named)} is not used by `mapping` "):
        parse_config(["mapping"] + argv, env)


def test_mapping_leaves_the_serving_containers_environment_alone():
    """`kubectl exec` into the exporter's container runs `mapping` with the variables serving uses."""
    env = {"POD_GPU_EXPORTER_SHARING_PROC_ROOT": "/host/proc", "POD_GPU_EXPORTER_WEB_CONFIG_FILE": "/etc/web.yml",
           "POD_GPU_EXPORTER_DCGM_URL": "http://127.0.0.1:9401/metrics", "POD_GPU_EXPORTER_LABELS_STYLE": "legacy"}
    assert parse_config(["mapping"], env).command == "mapping"


def test_mapping_takes_the_kubelet_the_api_labels_and_logs():
    argv = ["mapping", "--kubelet.socket", "/k.sock", "--kubelet.timeout", "2s", "--kubernetes.api", "on",
            "--kubernetes.kubeconfig", "/kc", "--kubernetes.node-name", "n1", "--labels.extra", "pod_uid",
            "--labels.pod-labels", "team", "--labels.pod-annotations", "owner", "--log.level", "debug", "-o", "json"]
    config = parse_config(argv, {"POD_GPU_EXPORTER_LOG_FORMAT": "json"})
    assert (config.kubelet_socket, config.labels_pod_annotations, config.log_format) == ("/k.sock", "owner", "json")


@pytest.mark.parametrize("argv, env, named", [
    (["--kubernetes.api", "off"], {}, "--kubernetes.api"),
    (["--kubernetes.kubeconfig", "/kc"], {}, "--kubernetes.kubeconfig"),
    (["--labels.pod-annotations", "owner"], {}, "--labels.pod-annotations"),
    ([], {"POD_GPU_EXPORTER_KUBERNETES_NODE_NAME": "n1"}, "POD_GPU_EXPORTER_KUBERNETES_NODE_NAME"),
    ([], {"POD_GPU_EXPORTER_LABELS_POD_LABELS": "team"}, "POD_GPU_EXPORTER_LABELS_POD_LABELS"),
])
def test_demo_refuses_the_kubernetes_api_settings(argv, env, named):
    with pytest.raises(ConfigError, match=f"^{re.escape(named)} is not used by `demo` "):
        parse_config(["demo"] + argv, env)


@pytest.mark.parametrize("argv", [["--sharing.mode", "device"], ["--sharing.proc-root", "/proc"],
                                  ["--health.xid-events", "on"]])
def test_demo_refuses_what_demo_nvml_decides(argv):
    # Taken and then replaced, these would be ignored; with --demo.nvml off they would read the real
    # /proc and the real driver.
    with pytest.raises(ConfigError, match=f"^{re.escape(argv[0])} is not used by `demo` \\(the demo sets it with --demo.nvml"):
        parse_config(["demo", *argv], {})


def test_demo_takes_extra_labels_and_keeps_its_queue_labels():
    from exporter.demo.node import demo_labels_extra

    # Its API server holds the simulated pods' owners and queues: what is asked is served, queue always.
    assert parse_config(["demo", "--labels.extra", "workload"], {}).labels_extra == "workload"
    assert [demo_labels_extra(asked) for asked in ("", "workload", "pod_uid, queue")] == \
        ["queue", "workload,queue", "pod_uid,queue"]
    with pytest.raises(ConfigError, match="unknown extra label 'workloads'"):
        parse_config(["demo", "--labels.extra", "workloads"], {})


def test_help_shows_the_node_name_default_it_computes():
    text = " ".join(build_parser().format_help().split())
    assert "(default: env NODE_NAME, as the downward API sets it, else the host name)" in text


def test_label_budget_flags_and_their_environment_variables():
    assert (Config().labels_mode, Config().labels_limit) == ("samples", None)
    config = parse_config(["--labels.mode", "join", "--labels.limit", "27"], {})
    assert (config.labels_mode, config.labels_limit) == ("join", 27)
    environ = {"POD_GPU_EXPORTER_LABELS_MODE": "join", "POD_GPU_EXPORTER_LABELS_LIMIT": "30"}
    assert (parse_config([], environ).labels_mode, parse_config([], environ).labels_limit) == ("join", 30)
    assert parse_config(["--labels.limit", "12"], environ).labels_limit == 12  # the flag wins


@pytest.mark.parametrize("args, env, says", [
    (["--labels.mode", "both"], {}, "--labels.mode: invalid choice 'both' (choose from samples, join)"),
    (["--labels.limit", "11"], {}, "--labels.limit: expected a whole number of labels, at least 12, got '11'"),
    (["--labels.limit", "-30"], {}, "--labels.limit: expected a whole number"),
    ([], {"POD_GPU_EXPORTER_LABELS_LIMIT": "thirty"}, "POD_GPU_EXPORTER_LABELS_LIMIT: expected a whole number"),
])
def test_bad_label_budget_settings(args, env, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_config(args, env)


def test_demo_nvml_is_on_by_default_and_only_for_the_demo():
    assert parse_config(["demo"], {}).demo_nvml == "on"
    assert parse_config(["demo"], {"POD_GPU_EXPORTER_DEMO_NVML": "off"}).demo_nvml == "off"
    with pytest.raises(ConfigError, match=r"^--demo.nvml is not used by `serve` "):
        parse_config(["--demo.nvml", "off"], {})
    with pytest.raises(ConfigError, match=r"^--demo.nvml: invalid choice 'maybe'"):
        parse_config(["demo", "--demo.nvml", "maybe"], {})


def test_xid_events_flag_and_its_environment_variable():
    assert Config().health_xid_events == "auto"
    assert parse_config(["--health.xid-events", "on"], {}).health_xid_events == "on"
    environ = {"POD_GPU_EXPORTER_HEALTH_XID_EVENTS": "off"}
    assert parse_config([], environ).health_xid_events == "off"
    assert parse_config(["--health.xid-events", "on"], environ).health_xid_events == "on"  # the flag wins
    with pytest.raises(ConfigError, match=re.escape("--health.xid-events: invalid choice 'yes' (choose from auto, on, off)")):
        parse_config(["--health.xid-events", "yes"], {})
    with pytest.raises(ConfigError, match=re.escape("--health.xid-events is not used by `mapping`")):
        parse_config(["mapping", "--health.xid-events", "on"], {})
    assert parse_config(["mapping"], environ).command == "mapping"  # a serving container's environment


def dcgm_endpoint(config):
    return DcgmCollector().options(config).endpoint


def label_spec(config):
    return KubernetesCollector().options(config).labels


def test_flags_a_source_needs_parsed_reach_it_as_its_options_object():
    # The label spec and --dcgm.url's parts are each collector's frozen options, built from the Config's
    # parsed flags (a Config made again by dataclasses.replace, as the demo does, gives its own), so that
    # no source parses a flag after start-up.
    import dataclasses

    config = parse_config(["--labels.extra", "workload,queue", "--labels.pod-labels", "team|app"], {})
    assert label_spec(config).workload and label_spec(config).queue and not label_spec(config).pod_uid
    assert label_spec(config).pod_labels.pattern == "team|app" and label_spec(config).pod_annotations is None
    assert dcgm_endpoint(config).port == 9401
    served = dataclasses.replace(parse_config(["demo"], {}), command="serve", dcgm_url="http://127.0.0.1:1/m",
                                 labels_extra="pod_uid")
    assert (dcgm_endpoint(served).port, label_spec(served).pod_uid) == (1, True)
    assert dcgm_endpoint(parse_config(["mapping"], {})) is None  # `mapping` fetches nothing from dcgm-exporter
    with pytest.raises(dataclasses.FrozenInstanceError):
        DcgmCollector().options(config).file = "/run/dcgm.prom"  # frozen, as the Config is


def test_the_config_holds_its_typed_fields_and_nothing_set_beside_them():
    import dataclasses

    fields = dataclasses.fields(Config)
    untyped = [field.name for field in fields if field.type in (object, "object")]
    assert not untyped
    assert {field.name: field.type for field in fields}["kubelet_timeout_seconds"] is float
    config = parse_config(["--labels.extra", "workload", "--dcgm.url", "http://127.0.0.1:1/m"], {})
    assert set(vars(config)) == {field.name for field in fields}  # no value set on it after it was made
