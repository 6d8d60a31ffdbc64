"""FigureReader: a refilled answer's figures read from the refill's values give what searching the answer gives."""

from __future__ import annotations

import re
from typing import Callable, List

import pytest

from exporter.core.mapping import build_mapping
from exporter.exposition.device_figures import FigureReader, read_device_figures
from exporter.exposition.pod_numbers import _FIELDS as POD_NUMBER_FIELDS
from exporter.exposition.rewriter import Rewriter
from exporter.vendors.amd.demo_exporter import SimulatedAmdExporter
from exporter.vendors.amd.figures import AMD_FIGURES
from exporter.vendors.nvidia.device_ids import DEVICE_FORMS
from exporter.vendors.nvidia.figures import DCGM_FIGURES
from support.fixtures import fixture_bytes

PAGE_FIELDS = ("utilization_percent", "engine_active_ratio", "memory_used_mib", "memory_free_mib",
               "memory_reserved_mib", "power_watts")
# A sample line's value: what follows its labels' closing brace and one space, to the line's end.
_VALUE = re.compile(rb"(\} )([^ \n]+)$", re.MULTILINE)
NVIDIA_FIXTURES = ("dcgm/l4-aws-gpu-operator-default-counters.prom", "dcgm/a800-8gpu-mig-2g20gb-mixed-excerpt.prom",
                   "dcgm/repo-fixture-h100-8gpu-mig-1g10gb-render-4.8.2-template.prom",
                   "dcgm/nvidia-docs-a100-mig-2.x-gpu-and-gi.prom", "dcgm/lke-rtx4000ada-k8s.prom")


def with_new_values(body: bytes, generation: int) -> bytes:
    """The body with every sample's value replaced by one of this generation's (a NaN now and then)."""
    count = iter(range(1_000_000))

    def value(match: re.Match) -> bytes:
        number = next(count)
        new = b"NaN" if (number + generation) % 17 == 0 else str((number * 7 + generation * 13) % 101 + 0.5).encode()
        return match.group(1) + new

    return _VALUE.sub(value, body)


def answers(first: bytes, later: Callable[[int], bytes], rewriter: Rewriter, count: int = 4) -> List[tuple]:
    """(body, the rewriter's values for it) for a first body and `count` later ones, rewritten in turn."""
    made = []
    for body in [first] + [later(generation) for generation in range(1, count + 1)]:
        rewriter.rewrite(body)
        made.append((body, rewriter.last_values))
    return made


@pytest.mark.parametrize("fields", [PAGE_FIELDS, POD_NUMBER_FIELDS])
@pytest.mark.parametrize("fixture", NVIDIA_FIXTURES)
def test_dcgm_answers_read_from_their_values_give_the_searched_figures(fixture, fields):
    first = fixture_bytes(fixture)
    rewriter = Rewriter(build_mapping(DEVICE_FORMS, []))
    reader = FigureReader(DCGM_FIGURES, fields)
    made = answers(first, lambda generation: with_new_values(first, generation), rewriter)
    assert made[0][1] is None and all(values is not None for _, values in made[1:])  # refilled after the first
    for body, values in made:
        assert reader.read(body, values) == read_device_figures(body, DCGM_FIGURES, fields)
    assert reader.placed == len(made) - 1


def test_amd_answers_read_from_their_values_give_the_searched_figures():
    moment = [0.0]
    exporter = SimulatedAmdExporter(clock=lambda: moment[0])

    def at(seconds: float) -> bytes:
        moment[0] = seconds
        return exporter.render()

    rewriter = Rewriter(build_mapping(DEVICE_FORMS, []), dialect=AMD_FIGURES.dialect)
    reader = FigureReader(AMD_FIGURES, POD_NUMBER_FIELDS)
    made = answers(at(0.0), lambda generation: at(generation * 7.5), rewriter)
    assert all(values is not None for _, values in made[1:])
    assert len({body for body, _ in made}) == len(made)  # the values moved
    for body, values in made:
        figures = reader.read(body, values)
        assert figures == read_device_figures(body, AMD_FIGURES, POD_NUMBER_FIELDS)
        assert any(device.partitioned for device in figures.values())  # the CPX GPU's whole figures
    assert reader.placed == len(made) - 1


def test_a_sample_in_a_form_the_values_do_not_carry_is_searched_each_time():
    """A value with a timestamp after it is fixed text to the template, yet a figure to the search: such answers
    are searched, and still read the same."""
    def body(generation: int) -> bytes:
        return (f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1"}} {generation}\n'
                f'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-1"}} 7 1700000000000\n'
                f'DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-2"}} {generation + 1}\n').encode()

    rewriter = Rewriter(build_mapping(DEVICE_FORMS, []))
    reader = FigureReader(DCGM_FIGURES, POD_NUMBER_FIELDS)
    made = answers(body(0), body, rewriter)
    assert all(values is not None for _, values in made[1:])
    for answer, values in made:
        assert reader.read(answer, values) == read_device_figures(answer, DCGM_FIGURES, POD_NUMBER_FIELDS)
    assert reader.placed == 0


def test_a_new_template_is_placed_anew():
    """A GPU gone from the answer: a new template, whose values are placed again, not read by the old places."""
    two = b'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 5\nDCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2"} 6\n'
    one = b'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2"} 6\n'
    rewriter = Rewriter(build_mapping(DEVICE_FORMS, []))
    reader = FigureReader(DCGM_FIGURES, POD_NUMBER_FIELDS)
    bodies = [two, two.replace(b"} 5", b"} 9"), one, one.replace(b"} 6", b"} 1"), one.replace(b"} 6", b"} 2")]
    for body in bodies:
        rewriter.rewrite(body)
        assert reader.read(body, rewriter.last_values) == read_device_figures(body, DCGM_FIGURES, POD_NUMBER_FIELDS)
    assert reader.placed == 3



def test_a_scaled_family_is_scaled_either_way():
    """A vendor whose exporter reports memory in bytes: its figure is scaled to MiB whichever way it is read."""
    names = DCGM_FIGURES._replace(memory_used_mib=(("VENDOR_MEMORY_USED_BYTES", 1 / 2**20),))

    def body(generation: int) -> bytes:
        return f'VENDOR_MEMORY_USED_BYTES{{gpu="0",UUID="GPU-1"}} {generation * 2**20}\n'.encode()

    rewriter = Rewriter(build_mapping(DEVICE_FORMS, []))
    reader = FigureReader(names, POD_NUMBER_FIELDS)
    for generation, (answer, values) in enumerate(answers(body(0), body, rewriter)):
        (figures,) = reader.read(answer, values).values()
        assert figures.memory_used_mib == generation
    assert reader.placed == 4


def test_a_figure_line_whose_value_is_no_number_reads_as_none_either_way():
    """A line the rewrite drops (its value is no number) stays in the template as fixed text: its figure is none
    whichever way it is read, and the others still move."""
    def body(generation: int) -> bytes:
        return (f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1"}} {generation}\n'
                f'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-1"}} lots\n').encode()

    rewriter = Rewriter(build_mapping(DEVICE_FORMS, []))
    reader = FigureReader(DCGM_FIGURES, POD_NUMBER_FIELDS)
    for generation, (answer, values) in enumerate(answers(body(0), body, rewriter)):
        (figures,) = reader.read(answer, values).values()
        assert (figures.utilization_percent, figures.memory_used_mib) == (generation, None)
        assert reader.read(answer, values) == read_device_figures(answer, DCGM_FIGURES, POD_NUMBER_FIELDS)
    assert reader.placed == 8
