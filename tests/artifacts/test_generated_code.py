"""exporter/_gen/ is exactly what scripts/generate_protos.py makes from protos/, and keeps the wire contract."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from exporter._gen.podresources.v1 import api_pb2 as v1_pb2
from exporter._gen.podresources.v1alpha1 import api_pb2 as v1alpha1_pb2

REPO_ROOT = Path(__file__).resolve().parents[2]
GENERATED = REPO_ROOT / "exporter" / "_gen"
PINNED_GRPCIO_TOOLS = "1.66.2"
# An interpreter that has the pinned generator, when the one running the tests does not.
GENERATOR_PYTHON = os.environ.get("PROTO_GENERATOR_PYTHON", sys.executable)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def _generator_version(python: str = GENERATOR_PYTHON) -> str:
    probe = subprocess.run([python, "-c", "from grpc_tools import grpc_version; print(grpc_version.VERSION)"],
                           capture_output=True, text=True, timeout=60)
    return probe.stdout.strip() if probe.returncode == 0 else "not installed"


def test_generated_code_matches_a_fresh_generation(tmp_path):
    version = _generator_version()
    if version == "not installed":
        # The test extra leaves the generator out (its pin would hold protobuf back to 5.x); the
        # floors run of .ci/run installs the codegen extra and so runs this test.
        pytest.skip(f"grpcio-tools is not installed for {GENERATOR_PYTHON}; install grpcio-tools=="
                    f"{PINNED_GRPCIO_TOOLS} (pip install -e '.[codegen]') to compare exporter/_gen with a "
                    "fresh generation")
    if version != PINNED_GRPCIO_TOOLS:
        pytest.fail(f"grpcio-tools {version} found for {GENERATOR_PYTHON}; exporter/_gen is generated with "
                    f"grpcio-tools=={PINNED_GRPCIO_TOOLS}: run `pip install grpcio-tools=={PINNED_GRPCIO_TOOLS}` "
                    "(or point PROTO_GENERATOR_PYTHON at an interpreter that has it)")
    out = tmp_path / "gen"
    run = subprocess.run([GENERATOR_PYTHON, str(REPO_ROOT / "scripts" / "generate_protos.py"), "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    fresh, committed = _tree(out), _tree(GENERATED)
    assert sorted(fresh) == sorted(committed), "file lists differ: run scripts/generate_protos.py"
    changed = [name for name in fresh if fresh[name] != committed[name]]
    assert not changed, f"{changed} differ from a fresh generation: run scripts/generate_protos.py"


def test_generator_refuses_another_grpcio_tools(tmp_path):
    # The test interpreter is a valid "other version" only when it lacks the pinned generator.
    if _generator_version(sys.executable) == PINNED_GRPCIO_TOOLS:
        pytest.skip("this interpreter has the pinned grpcio-tools; nothing to refuse")
    run = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "generate_protos.py"), "--out",
                          str(tmp_path / "gen")], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert f"grpcio-tools=={PINNED_GRPCIO_TOOLS}" in run.stderr
    assert not (tmp_path / "gen").exists()


def test_method_paths_keep_the_kubelet_package_names():
    # The package is part of the method path; a renamed package gets UNIMPLEMENTED from a real kubelet.
    assert v1_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == "v1.PodResourcesLister"
    assert sorted(v1_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name) == [
        "Get", "GetAllocatableResources", "List"]
    assert v1alpha1_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == "v1alpha1.PodResourcesLister"
    assert list(v1alpha1_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"].methods_by_name) == ["List"]


V1_FIELDS = {
    "ListPodResourcesResponse": {"pod_resources": 1},
    # Not cpu_ids/memory here: the kubelet's api.proto keeps those per container only.
    "PodResources": {"name": 1, "namespace": 2, "containers": 3},
    "ContainerResources": {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5},
    "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
    "ContainerMemory": {"memory_type": 1, "size": 2, "topology": 3},
    "TopologyInfo": {"nodes": 1},
    "NUMANode": {"ID": 1},
    "DynamicResource": {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4},
    "ClaimResource": {"cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4, "share_id": 5},
    "CDIDevice": {"name": 1},
    "AllocatableResourcesResponse": {"devices": 1, "cpu_ids": 2, "memory": 3},
    "GetPodResourcesRequest": {"pod_name": 1, "pod_namespace": 2},
    "GetPodResourcesResponse": {"pod_resources": 1},
    "ListPodResourcesRequest": {},
    "AllocatableResourcesRequest": {},
}
V1ALPHA1_FIELDS = {
    "ListPodResourcesRequest": {},
    "ListPodResourcesResponse": {"pod_resources": 1},
    "PodResources": {"name": 1, "namespace": 2, "containers": 3},
    "ContainerResources": {"name": 1, "devices": 2},
    "ContainerDevices": {"resource_name": 1, "device_ids": 2},
}


@pytest.mark.parametrize("module, expected", [(v1_pb2, V1_FIELDS), (v1alpha1_pb2, V1ALPHA1_FIELDS)],
                         ids=["v1", "v1alpha1"])
def test_field_numbers_follow_the_wire_contract(module, expected):
    messages = module.DESCRIPTOR.message_types_by_name
    assert sorted(messages) == sorted(expected)
    for name, fields in expected.items():
        actual = {field.name: field.number for field in messages[name].fields}
        assert actual == fields, name


def test_dynamic_resource_leaves_removed_class_name_unused():
    # Field 1 was class_name until Kubernetes 1.31; an old kubelet may still send it.
    old_kubelet_bytes = b"\x0a\x03gpu" + v1_pb2.DynamicResource(claim_name="c").SerializeToString()
    parsed = v1_pb2.DynamicResource.FromString(old_kubelet_bytes)
    assert parsed.claim_name == "c"
    assert 1 not in {field.number for field in v1_pb2.DynamicResource.DESCRIPTOR.fields}
