"""The node page's renderer: a NodeView as plain HTML, every string escaped, nothing from another host."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import List, Tuple

import pytest

from exporter.collectors.collector import SourceState
from exporter.core.identity import GpuIdentity, Owner
from exporter.web.node_page import GpuRow, Holder, NodeView, Written, render_node_page, write_block, write_value
from exporter.web.page_parts import BYTES, LOST, RATIO, WATTS, WITH_UNHELD, AFTER_GPUS, Amount, Block

UUID = "GPU-5e1f0c3a-0002-4d2b-9a61-0demo0000002"


class _Page(HTMLParser):
    """The page as a browser's parser reads it: its tags, attributes and text."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: List[Tuple[str, dict]] = []
        self.text: List[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def joined(self) -> str:
        return re.sub(r"\s+", " ", " ".join(self.text))


def _view(**changes) -> NodeView:
    shared = GpuRow("2", UUID, model="NVIDIA L4", health="healthy", holders=(
        Holder("inference", "llm-server-a", "vllm", 0.5, 6 * 2**30, 0.35),
        Holder("inference", "llm-server-b", "vllm", 0.25, 0, 0.0)))
    fields = dict(node="gpu-node-1", gpus=(shared,),
                  sources=(SourceState("kubelet", True, None, 3.0), SourceState("dcgm-exporter", True, None, 1.0)))
    fields.update(changes)
    return NodeView(**fields)


def _as_given(gpu: GpuIdentity) -> GpuIdentity:
    return gpu


def _page(view: NodeView) -> _Page:
    return _Page(render_node_page(view).decode())


def test_a_gpu_with_two_holders_lists_both_in_its_rows():
    page = _page(_view())
    text = page.joined()
    assert "inference/ llm-server-a /vllm 50 % 6.0 GiB 35 %" in text
    assert "inference/ llm-server-b /vllm 25 % 0.0 GiB 0 %" in text
    # The device's own cells span its two holders' rows.
    assert ("td", {"rowspan": "2"}) in page.tags
    assert "Every GPU is held." in text


def test_every_dynamic_string_is_escaped():
    evil = '<script>alert("x")</script>&"\''
    gpu = GpuIdentity(evil, evil, evil, "")
    block = Block(evil, [(gpu, Owner(evil, evil, evil), evil)], (evil, evil, evil))
    view = _view(node=evil, gpus=(GpuRow("0", evil, model=evil, health=evil, taints=(evil,), holders=(
        Holder(evil, evil, evil, figures=((evil, write_value(evil, _as_given)),)),),
        cells=((evil, Written(write_value(evil, _as_given))),)),), sources=(SourceState(evil, False, evil, None),),
        columns=(evil,), holder_columns=(evil,), blocks=((AFTER_GPUS, write_block(block, _as_given)),),
        unresolved=(evil,), figures_note=evil, telemetry_path='/x"><script>', links=((evil, evil),))
    html = render_node_page(view).decode()
    assert "<script" not in html
    page = _Page(html)
    assert not [tag for tag, _ in page.tags if tag == "script"]
    assert page.joined().count(evil) >= 18  # what was written reads back as the text it was
    assert ("a", {"href": '/x"><script>'}) in page.tags


def test_a_gpu_a_cell_says_lost_is_marked_and_a_block_lists_it():
    lost = GpuRow("3", "GPU-3", model="NVIDIA L4", taints=("gpu.nvidia.com/unmonitored:None",), health="healthy",
                  cells=(("health", Written("lost", LOST)),))
    listed = Block("Lost GPUs", [(GpuIdentity("GPU-3", "3", "", ""), ": it is gone")], state=LOST)
    html = render_node_page(_view(gpus=(lost,), blocks=((AFTER_GPUS, write_block(listed, _as_given)),))).decode()
    page = _Page(html)
    text = page.joined()
    assert "Lost GPUs" in text and '<ul class="lost"><li><b>GPU 3</b> GPU-3: it is gone</li></ul>' in html
    assert "GPU 3 GPU-3: it is gone" in text
    assert ("tbody", {"class": "lost"}) in page.tags
    # The cell takes the place of the table's own health cell, drawn as a failure.
    assert '<td class="down">lost</td>' in html and "healthy" not in text
    assert "gpu.nvidia.com/<wbr>unmonitored:None" in html  # a long key may wrap after its slash


def test_a_collectors_column_and_figure_add_cells_and_fill_the_tables_own():
    held = Holder("ml", "trainer", "pytorch", 1.0, 2**30, 0.5, 100.0,
                  figures=(("SM", write_value(Amount(0.25, RATIO), _as_given)), ("energy", "12 J")))
    gpu = GpuRow("0", "GPU-0", holders=(held,), cells=(("temperature", Written("71 °C")),))
    html = render_node_page(_view(gpus=(gpu,), columns=("temperature",), holder_columns=("energy",))).decode()
    page = _Page(html)
    assert '<th colspan="9">the device</th><th colspan="6" class="holders">its holders</th>' in html
    assert "<th>power</th><th>temperature</th><th class=\"holders\">container</th>" in html
    assert "<th>SM</th><th>power</th><th>energy</th></tr>" in html
    # Its SM stands where the device's own would, its energy in a column of its own.
    assert "ml/ trainer /pytorch 100 % 1.0 GiB 25 % 100.0 W 12 J" in page.joined()
    assert "71 °C" in page.joined()
    assert "table.gpus td:nth-last-child(6)" in html  # the first holder column still ruled off


def test_the_values_a_block_holds_are_written_by_kind():
    gpu = GpuIdentity("GPU-9", "9", "", "2")
    row = (gpu, Owner("ns", "pod", "c"), Amount(3 * 2**29, BYTES), Amount(0.125, RATIO), Amount(75.25, WATTS),
           Amount(None, RATIO), None)
    html = write_block(Block("Figures", [row], ("GPU", "container", "memory", "SM", "power", "blank", "none"),
                             place=WITH_UNHELD), _as_given)
    assert html == ("<h3>Figures</h3><table><thead><tr><th>GPU</th><th>container</th><th>memory</th><th>SM</th>"
                    "<th>power</th><th>blank</th><th>none</th></tr></thead><tbody><tr><td>9/2</td>"
                    "<td>ns/<b>pod</b>/c</td><td>1.5 GiB</td><td>12 %</td><td>75.2 W</td><td></td><td></td></tr>"
                    "</tbody></table>")
    assert write_block(Block("Nothing", []), _as_given) == ""  # a block without rows is not shown
    with pytest.raises(TypeError):
        write_value(3.5, _as_given)  # a bare number says no unit: the page refuses to guess one


def test_a_gpu_nobody_holds_says_so_and_is_listed_as_unheld():
    free = GpuRow("1", "GPU-1", model="NVIDIA L4")
    used = Block("Used without being held", [(GpuIdentity("GPU-1", "1", "", ""), Owner("research", "notebook-7", "jupyter"),
                                              Amount(829423616, BYTES), Amount(0.03, RATIO))],
                 ("GPU", "container", "memory", "SM"), place=WITH_UNHELD)
    text = _page(_view(gpus=(free,), blocks=((WITH_UNHELD, write_block(used, _as_given)),))).joined()
    assert "nobody" in text
    assert "Held by nobody GPU 1 GPU-1" in text
    assert "Used without being held" in text and "research/ notebook-7 /jupyter 0.8 GiB 3 %" in text


def test_a_down_source_shows_why_and_its_data_age():
    down = SourceState("kubelet", False, "kubelet socket /var/lib/kubelet/pod-resources/kubelet.sock not found",
                       125.0)
    page = _page(_view(sources=(down,), sources_off=(("NVML", "--sharing.mode process"), ("files", ""))))
    text = page.joined()
    assert "kubelet down 2 min kubelet socket /var/lib/kubelet/pod-resources/kubelet.sock not found" in text
    assert ("td", {"class": "down"}) in page.tags
    assert "Not in use: NVML (turned on by --sharing.mode process); files (off)." in text


def test_the_page_reloads_itself_loads_nothing_and_runs_no_script():
    page = _page(_view())
    assert ("meta", {"http-equiv": "refresh", "content": "10"}) in page.tags
    assert not [tag for tag, _ in page.tags if tag in ("script", "link", "img", "iframe")]
    html = render_node_page(_view()).decode()
    assert "http://" not in html and "https://" not in html and "//" not in html.replace("://", "")
    assert ("a", {"href": "/gpu/metrics"}) in page.tags


def test_no_figures_yet_is_said_not_left_blank():
    text = _page(_view(gpus=(), figures_note="no scrape yet")).joined()
    assert "Device figures: no scrape yet." in text and "No GPU known yet." in text
