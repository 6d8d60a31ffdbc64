"""The generated reference (docs/flags.md, docs/metrics.md) is what scripts/render_reference.py writes from the
code, covers every flag and family, and nothing else in README.md or docs/ contradicts it: every flag, variable
and family they name is in it, with the default it gives."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, NamedTuple, Optional

import pytest

from exporter.base.flag_values import parse_duration
from exporter.config import build_parser, env_var_name
from exporter.collectors.catalogue import CATALOGUE
from exporter.exposition.families import OWNER
from exporter.top.options import build_parser as build_top_parser

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "render_reference.py"
FLAGS_PAGE = ROOT / "docs" / "flags.md"
METRICS_PAGE = ROOT / "docs" / "metrics.md"
GENERATED = {FLAGS_PAGE, METRICS_PAGE}
PAGES = [ROOT / "README.md", *sorted(page for page in (ROOT / "docs").glob("*.md") if page not in GENERATED)]

# Dotted names that are other programs' flags, not ours, where a page names them.
OTHER_PROGRAMS_FLAGS = {"--web.enable-lifecycle": "Prometheus's", "--config.file": "Prometheus's",
                        "--storage.tsdb.path": "Prometheus's",
                        "--receive.relabel-config": "Thanos Receive's"}
# Families that do not exist on purpose: docs/architecture.md walks through adding this one.
WORKED_EXAMPLES = {"pod_gpu_device_driver_info"}

_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*\.[a-z0-9.*-]*[a-z0-9*]")
# `pod_gpu_container_*` stands for a group of families: tried before the plain name it starts with.
_FAMILY = re.compile(r"(?<![\w:])pod_gpu_(?:[a-z0-9_]*_\*|[a-z0-9_]*[a-z0-9])")
_VARIABLE = re.compile(r"\bPOD_GPU_EXPORTER_[A-Z0-9_]*[A-Z0-9]\b")


def _run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


# --- The reference is generated, and whole ---------------------------------------------------------------
def test_the_reference_is_what_the_script_writes():
    done = _run_script("--check")
    assert done.returncode == 0, done.stderr


def test_check_names_a_page_that_differs(tmp_path):
    (tmp_path / "docs").mkdir()
    shutil.copy(FLAGS_PAGE, tmp_path / "docs" / "flags.md")
    (tmp_path / "docs" / "metrics.md").write_text(METRICS_PAGE.read_text().replace("| counter |", "| gauge |", 1))
    done = _run_script("--check", "--root", str(tmp_path))
    assert done.returncode == 1
    assert "docs/metrics.md differs" in done.stderr and "docs/flags.md" not in done.stderr
    assert _run_script("--root", str(tmp_path)).returncode == 0  # writing puts it right
    assert (tmp_path / "docs" / "metrics.md").read_text() == METRICS_PAGE.read_text()


class ReferenceFlag(NamedTuple):
    names: tuple
    env: str
    default: str
    refused_by: str


def reference_flags(page: Path = FLAGS_PAGE) -> Dict[str, ReferenceFlag]:
    """Each flag name of the page's tables → its row; the top table has no `refused by` column."""
    found = {}
    for line in page.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        names = tuple(re.findall(r"`(--?[\w.-]+)`", cells[0])) if line.startswith("| `-") else ()
        if names:
            env = re.match(r"`([A-Z0-9_]+)`", cells[1])
            row = ReferenceFlag(names, env.group(1) if env else "", cells[2].strip("`"),
                                cells[3] if len(cells) == 5 else "")
            found.update(dict.fromkeys(names, row))
    return found


def test_every_flag_of_every_command_is_in_the_reference_with_its_variable():
    reference = reference_flags()
    for action in build_parser()._actions:
        for name in action.option_strings:
            if name not in ("-h", "--help"):
                assert name in reference, f"{name} is not in docs/flags.md"
                if name.startswith("--") and "." in name:
                    assert reference[name].env == env_var_name(name), name
    for action in build_top_parser("top")._actions:
        for name in action.option_strings:
            assert name in reference or name in ("-h", "--help"), f"top's {name} is not in docs/flags.md"


def test_the_reference_says_which_commands_refuse_a_flag():
    reference = reference_flags()
    assert reference["--kubelet.socket"].refused_by == "`demo`"
    # mapping refuses the flag, never the serving container's variable (exporter.config.refuse_unused_settings)
    assert reference["--demo.nvml"].refused_by == "`serve`, `mapping` (the flag only)"
    assert reference["--log.level"].refused_by == "—"


def reference_families(page: Path = METRICS_PAGE) -> Dict[str, List[str]]:
    """family → its row's cells: name, type, labels, when, meaning."""
    rows = {}
    for line in page.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `(pod_gpu_\w+)` \|", line)
        if match:
            rows[match.group(1)] = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
    return rows


def test_every_family_is_in_the_reference_with_its_type_and_labels():
    rows = reference_families()
    assert set(rows) == {family.name for family in CATALOGUE}
    for family in CATALOGUE:
        name, type_, labels = rows[family.name][:3]
        assert type_ == family.type, family.name
        written = re.findall(r"`(\w+)`", labels) + (list(OWNER) if "owner labels" in labels else [])
        assert sorted(written) == sorted(family.label_order), family.name
        optional = [name for part in re.findall(r"\[([^\]]*)\]", labels) for name in re.findall(r"`(\w+)`", part)]
        assert sorted(optional) == sorted(family.optional_labels), family.name


# --- Nothing else contradicts it ---------------------------------------------------------------------------
def _mentions(pattern: re.Pattern, pages) -> Iterator[tuple]:
    for page in pages:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for mention in pattern.findall(line):
                yield f"{page.name}:{number}", mention


def _known(mention: str, names) -> bool:
    """A name, or a `prefix*` that stands for at least one name."""
    if mention.endswith("*"):
        return any(name.startswith(mention[:-1]) for name in names)
    return mention in names


def unknown_flags(pages) -> List[str]:
    names = set(reference_flags()) | set(OTHER_PROGRAMS_FLAGS)
    return [f"{where}: {flag}" for where, flag in _mentions(_FLAG, pages) if not _known(flag, names)]


def unknown_families(pages) -> List[str]:
    names = set(reference_families()) | WORKED_EXAMPLES
    return [f"{where}: {family}" for where, family in _mentions(_FAMILY, pages) if not _known(family, names)]


def unknown_variables(pages) -> List[str]:
    names = {row.env for row in reference_flags().values()}
    return [f"{where}: {variable}" for where, variable in _mentions(_VARIABLE, pages) if variable not in names]


def _same_default(documented: str, reference: str) -> bool:
    documented, reference = documented.strip("`"), reference.strip("`")
    if documented == reference:
        return True
    try:
        return parse_duration(documented) == parse_duration(reference)  # 2m30s is 150s
    except ValueError:
        return False


def wrong_defaults(pages) -> List[str]:
    """Rows of a hand-written table with a `default` column whose first cell is one flag: that default must be
    the reference's (a default the reference gives in words is not compared)."""
    reference, wrong = reference_flags(), []
    for page in pages:
        header: Optional[List[str]] = None
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if not line.startswith("|"):
                header = None
                continue
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            if header is None:
                header = [cell.lower() for cell in cells]
                continue
            flag = re.fullmatch(r"`(--[\w.-]+)`", cells[0])
            if "default" in header and flag and flag.group(1) in reference:
                given, documented = reference[flag.group(1)].default, cells[header.index("default")]
                if " " not in given and not _same_default(documented, given):
                    wrong.append(f"{page.name}:{number}: {flag.group(1)} documented with default {documented}, "
                                 f"docs/flags.md gives {given}")
    return wrong


# A default said in prose: "`--flag`, default `X`", "`--flag` (`VARIABLE`, default `X`)", "`--flag`: `X` (the
# default)" and "`--flag X` (the default)".
_PROSE_DEFAULTS = (
    re.compile(r"`(?:-\w/)?(--[\w.-]+)[^`]*`,? \(?(?:`[A-Z0-9_]+`, )?default `([^`]+)`"),
    re.compile(r"`(--[\w.-]+)`:? `([^`]+)` \(the default\)"),
    re.compile(r"`(--[\w.-]+) ([^`\s|]+)` \(the default\)"),
)


def wrong_prose_defaults(pages) -> List[str]:
    reference, wrong = reference_flags(), []
    for pattern in _PROSE_DEFAULTS:
        for where, (flag, documented) in _mentions(pattern, pages):
            given = reference[flag].default if flag in reference else None
            if given and " " not in given and not _same_default(documented, given):
                wrong.append(f"{where}: {flag} said to default to {documented}, docs/flags.md gives {given}")
    return wrong


@pytest.mark.parametrize("check", [unknown_flags, unknown_families, unknown_variables, wrong_defaults,
                                   wrong_prose_defaults],
                         ids=lambda check: check.__name__)
def test_the_docs_agree_with_the_reference(check):
    found = check(PAGES)
    assert not found, "\n".join(found)


def test_a_page_that_contradicts_the_reference_is_seen(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Set `--kubelet.refresh-intervall 5s` or POD_GPU_EXPORTER_KUBELET_INTERVAL; see\n"
                    "`pod_gpu_exporter_dcgm_upp` and `pod_gpu_nothing_*`, not `pod_gpu_container_*` or `--sharing.*`.\n\n"
                    "| flag | default | meaning |\n|---|---|---|\n"
                    "| `--kubelet.timeout` | `10s` | wrong |\n| `--kubernetes.watch-silence-timeout` | `2m30s` | right |\n\n"
                    "`-N/--exporter.namespace`, default `gpu`; `--labels.mode x` (`POD_GPU_EXPORTER_LABELS_MODE`, default "
                    "`join`); `--by node` (the default); `--health.xid-events`: `auto` (the default); `--sort`, default `sm`\n")
    assert unknown_flags([page]) == ["page.md:1: --kubelet.refresh-intervall"]
    assert unknown_variables([page]) == ["page.md:1: POD_GPU_EXPORTER_KUBELET_INTERVAL"]
    assert unknown_families([page]) == ["page.md:2: pod_gpu_exporter_dcgm_upp", "page.md:2: pod_gpu_nothing_*"]
    assert wrong_defaults([page]) == ["page.md:6: --kubelet.timeout documented with default `10s`, "
                                      "docs/flags.md gives 5s"]
    assert wrong_prose_defaults([page]) == [
        "page.md:9: --exporter.namespace said to default to gpu, docs/flags.md gives gpu-monitoring",
        "page.md:9: --labels.mode said to default to join, docs/flags.md gives samples",
        "page.md:9: --by said to default to node, docs/flags.md gives pod"]
