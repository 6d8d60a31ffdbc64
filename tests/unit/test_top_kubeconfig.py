"""`$KUBECONFIG` lists merged as kubectl merges them, and which contexts `top` reads."""

from __future__ import annotations

import os

import pytest
import yaml

from exporter.top.errors import TopSourceError
from exporter.top.kube_client import contexts_to_read
from exporter.top.kubeconfig import KubeconfigError, kubeconfig_files, merged_kubeconfig


def write(path, clusters, contexts, current=None):
    config = {"apiVersion": "v1", "kind": "Config",
              "clusters": [{"name": name, "cluster": body} for name, body in clusters.items()],
              "users": [{"name": "me", "user": {"token": str(path)}}],
              "contexts": [{"name": name, "context": {"cluster": cluster, "user": "me"}}
                           for name, cluster in contexts.items()]}
    if current is not None:
        config["current-context"] = current
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_first_file_to_name_an_entry_wins_and_the_first_current_context(tmp_path):
    (tmp_path / "a").mkdir()
    first = write(tmp_path / "a" / "config", {"east": {"server": "https://east", "certificate-authority": "ca.crt"}},
                  {"east": "east"}, current="")
    second = write(tmp_path / "b", {"east": {"server": "https://elsewhere"}, "west": {"server": "https://west"}},
                   {"east": "west", "west": "west"}, current="west")
    third = write(tmp_path / "c", {}, {}, current="east")
    merged = merged_kubeconfig([first, str(tmp_path / "missing"), second, third])
    clusters = {entry["name"]: entry["cluster"] for entry in merged["clusters"]}
    contexts = {entry["name"]: entry["context"]["cluster"] for entry in merged["contexts"]}
    assert clusters["east"]["server"] == "https://east" and clusters["west"]["server"] == "https://west"
    assert contexts == {"east": "east", "west": "west"}
    assert merged["current-context"] == "west"  # the first file's is empty: it sets none
    assert [entry["user"]["token"] for entry in merged["users"]] == [first]  # one user `me`: the first file's
    # A relative path is relative to the file that holds it.
    assert clusters["east"]["certificate-authority"] == os.path.join(str(tmp_path / "a"), "ca.crt")


def test_the_list_is_read_in_order_each_file_once(tmp_path):
    assert kubeconfig_files({"KUBECONFIG": f"/a{os.pathsep}{os.pathsep}/b{os.pathsep}/a"}) == ("/a", "/b")


def test_a_file_that_is_no_kubeconfig_is_named(tmp_path):
    (tmp_path / "broken").write_text("clusters: [\n")
    (tmp_path / "list").write_text("- a\n")
    for name in ("broken", "list"):
        with pytest.raises(KubeconfigError, match=str(tmp_path / name)):
            merged_kubeconfig([str(tmp_path / name)])


def test_which_contexts_are_read(tmp_path):
    config = merged_kubeconfig([write(tmp_path / "k", {"c": {"server": "https://c"}},
                                      {"east": "c", "west": "c", "north": "c"}, current="east")])
    assert contexts_to_read(config, [], False, None) == []  # the current context, its rows named by no cluster
    assert contexts_to_read(config, [], True, None) == ["east", "west", "north"]
    assert contexts_to_read(config, ["west", "east"], False, None) == ["west", "east"]
    assert contexts_to_read(config, [], True, "west") == ["west"]
    assert contexts_to_read(config, [], False, "north") == ["north"]  # --cluster alone: that context
    with pytest.raises(TopSourceError, match="no context 'south'.*east, west, north"):
        contexts_to_read(config, ["south"], False, None)
    with pytest.raises(TopSourceError, match="--cluster north: not one of the contexts read"):
        contexts_to_read(config, ["east"], False, "north")
