"""The node page's renderer: a NodeView as plain HTML, every string escaped, nothing from another host."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import List, Tuple

from exporter.collectors.collector import SourceState
from exporter.web.node_page import GpuRow, Holder, NodeView, UnallocatedUse, render_node_page

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
    view = _view(node=evil, gpus=(GpuRow("0", evil, model=evil, health=evil, taints=(evil,), holders=(
        Holder(evil, evil, evil),)),), sources=(SourceState(evil, False, evil, None),),
        unallocated=(UnallocatedUse(evil, evil, evil, evil),), unresolved=(evil,), figures_note=evil,
        telemetry_path='/x"><script>', links=((evil, evil),))
    html = render_node_page(view).decode()
    assert "<script" not in html
    page = _Page(html)
    assert not [tag for tag, _ in page.tags if tag == "script"]
    assert page.joined().count(evil) >= 10  # what was written reads back as the text it was
    assert ("a", {"href": '/x"><script>'}) in page.tags


def test_a_lost_gpu_is_marked_and_listed():
    lost = GpuRow("3", "GPU-3", model="NVIDIA L4", taints=("gpu.nvidia.com/unmonitored:None",), lost=True)
    html = render_node_page(_view(gpus=(lost,))).decode()
    page = _Page(html)
    text = page.joined()
    assert "Lost GPUs" in text
    assert "GPU 3 GPU-3: NVML reports it lost" in text
    assert ("tbody", {"class": "lost"}) in page.tags
    assert "gpu.nvidia.com/<wbr>unmonitored:None" in html  # a long key may wrap after its slash


def test_a_gpu_nobody_holds_says_so_and_is_listed_as_unheld():
    free = GpuRow("1", "GPU-1", model="NVIDIA L4")
    text = _page(_view(gpus=(free,), unallocated=(UnallocatedUse("1", "research", "notebook-7", "jupyter",
                                                                   829423616, 0.03),))).joined()
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
