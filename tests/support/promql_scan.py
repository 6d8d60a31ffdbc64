"""A small PromQL reader for the tests: every aggregation's and vector matching's label clause, and every selector.

Not a full parser: it tokenizes (strings, comments, numbers and durations, names, brackets), drops what sits
inside `{...}` matchers and `[...]` ranges, and finds each aggregation operator with its `by`/`without` clause
(before the body or after it) and each `on`/`ignoring` of a binary operator. That is all a check of "which
labels survive" needs, and it reads the real expressions rather than a pattern of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Tuple

AGGREGATORS = frozenset({"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "count_values",
                         "quantile", "topk", "bottomk", "limitk", "limit_ratio"})
KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                      "unless", "offset", "atan2"})

_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<number>0x[0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:[a-z]+\d*)*|Inf\b|NaN\b)
  | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<bracket>[(){}\[\],])
  | (?P<other>[^\s(){}\[\],A-Za-z0-9_:"'`\#]+)
""", re.VERBOSE)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


@dataclass(frozen=True)
class Grouping:
    """One aggregation (`sum`, ... with `by`/`without`, or `bare`) or vector matching (`on`/`ignoring`)."""

    operator: str  # the aggregation's name, or "match" for a binary operator's on/ignoring
    clause: str  # by | without | on | ignoring | bare (an aggregation with no clause)
    labels: Tuple[str, ...]


@dataclass(frozen=True)
class Selector:
    """A vector selector: its metric name (may be empty) and its matchers' text."""

    name: str
    matchers: str


def tokenize(expr: str) -> List[Token]:
    tokens, position = [], 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise ValueError(f"cannot read PromQL at {expr[position:position + 20]!r}")
        position = match.end()
        if match.lastgroup not in ("space", "comment"):
            tokens.append(Token(match.lastgroup, match.group()))
    return tokens


def _closing(tokens: List[Token], start: int) -> int:
    """The index of the bracket that closes the one at `start`."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    for index in range(start, len(tokens)):
        text = tokens[index].text if tokens[index].kind == "bracket" else ""
        if text in pairs:
            stack.append(pairs[text])
        elif text in (")", "}", "]"):
            if not stack or stack.pop() != text:
                raise ValueError(f"unbalanced {text!r}")
            if not stack:
                return index
    raise ValueError("unclosed bracket")


def _label_list(tokens: List[Token], start: int) -> Tuple[Tuple[str, ...], int]:
    """The labels of the `( a, b )` at `start`, and the index after its `)`."""
    end = _closing(tokens, start)
    labels = tuple(t.text.strip("\"'`") for t in tokens[start + 1:end] if t.text != ",")
    return labels, end + 1


def _is(tokens: List[Token], index: int, *texts: str) -> bool:
    return index < len(tokens) and tokens[index].text in texts


def groupings(expr: str) -> List[Grouping]:
    """Every aggregation and every on/ignoring of `expr`, in the order they appear."""
    return [grouping for _, grouping in _indexed_groupings(tokenize(expr))]


def _indexed_groupings(tokens: List[Token]) -> List[Tuple[int, Grouping]]:
    """Each aggregation and on/ignoring with the index of the token that starts it."""
    found, index = [], 0
    while index < len(tokens):
        token = tokens[index]
        if token.kind == "bracket" and token.text in "{[":
            index = _closing(tokens, index) + 1
            continue
        if token.kind == "name" and token.text in ("on", "ignoring") and _is(tokens, index + 1, "("):
            start = index
            labels, index = _label_list(tokens, index + 1)
            found.append((start, Grouping("match", token.text, labels)))
            continue
        if token.kind == "name" and token.text in ("group_left", "group_right") and _is(tokens, index + 1, "("):
            index = _label_list(tokens, index + 1)[1]  # labels copied over, not matched on
            continue
        if token.kind == "name" and token.text in AGGREGATORS and _is(tokens, index + 1, "(", "by", "without"):
            found.append((index, _aggregation(tokens, index)))
        index += 1
    return found


def _aggregation(tokens: List[Token], index: int) -> Grouping:
    """The aggregation at `index`: its clause stands before its body (`sum by (a) (x)`) or after it."""
    operator = tokens[index].text
    if _is(tokens, index + 1, "by", "without"):
        labels, _ = _label_list(tokens, index + 2)
        return Grouping(operator, tokens[index + 1].text, labels)
    after = _closing(tokens, index + 1) + 1
    if _is(tokens, after, "by", "without") and _is(tokens, after + 1, "("):
        labels, _ = _label_list(tokens, after + 1)
        return Grouping(operator, tokens[after].text, labels)
    return Grouping(operator, "bare", ())


def selectors(expr: str) -> List[Selector]:
    """Every vector selector of `expr` (a metric name not called as a function, or a bare `{...}`)."""
    return [selector for _, selector in _indexed_selectors(tokenize(expr))]


def _indexed_selectors(tokens: List[Token]) -> List[Tuple[int, Selector]]:
    """Each vector selector with the index of the token that starts it."""
    found, index = [], 0
    while index < len(tokens):
        token = tokens[index]
        if token.kind == "bracket" and token.text == "[":
            index = _closing(tokens, index) + 1
            continue
        if token.kind == "name" and token.text in ("on", "ignoring", "by", "without", "group_left", "group_right") \
                and _is(tokens, index + 1, "("):
            index = _label_list(tokens, index + 1)[1]
            continue
        name: Optional[str] = None
        start = index
        if token.kind == "name" and token.text not in KEYWORDS and not _is(tokens, index + 1, "(") \
                and not (token.text in AGGREGATORS and _is(tokens, index + 1, "by", "without")):
            name, index = token.text, index + 1
        elif token.text == "{":
            name = ""
        if name is None:
            index += 1
            continue
        matchers = ""
        if _is(tokens, index, "{"):
            end = _closing(tokens, index)
            matchers = "".join(t.text for t in tokens[index + 1:end])
            index = end + 1
        found.append((start, Selector(name, matchers)))
    return found


def dropping(expr: str, label: str) -> List[str]:
    """How `expr` loses `label` along the way: each aggregation or matching that does not keep it."""
    problems = []
    for grouping in groupings(expr):
        keeps = label in grouping.labels if grouping.clause in ("by", "on") else \
            label not in grouping.labels if grouping.clause in ("without", "ignoring") else False
        if not keeps:
            what = grouping.operator if grouping.operator != "match" else "vector matching"
            problems.append(f"{what} {grouping.clause} ({', '.join(grouping.labels)})")
    return problems


def _setting_spans(tokens: List[Token], label: str) -> List[Tuple[int, int]]:
    """The token spans of every `label_replace(x, "<label>", ...)`: inside one, the label is not set yet."""
    spans = []
    for index, token in enumerate(tokens):
        if token.text != "label_replace" or not _is(tokens, index + 1, "("):
            continue
        end, depth, position = _closing(tokens, index + 1), 0, index + 2
        while position < end and not (depth == 0 and tokens[position].text == ","):
            depth += {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}.get(tokens[position].text, 0)
            position += 1
        if position + 1 < end and tokens[position + 1].text.strip("\"'`") == label:
            spans.append((index, end))
    return spans


def unset_where_read(expr: str, label: str) -> List[str]:
    """Where a recording loses `label` or never gets it: each aggregation outside the branches that set it
    (`label_replace(branch, "<label>", ...)`) that does not keep it, and each family read outside those
    branches that is not a recorded series (`level:metric:operations`, which carries the label already)."""
    tokens = tokenize(expr)
    spans = _setting_spans(tokens, label)
    outside = lambda index: not any(start <= index <= end for start, end in spans)  # noqa: E731
    problems = [f"{grouping.operator} {grouping.clause} ({', '.join(grouping.labels)})"
                for index, grouping in _indexed_groupings(tokens)
                if outside(index) and grouping.operator != "match"
                and (label not in grouping.labels if grouping.clause == "by" else
                     label in grouping.labels if grouping.clause == "without" else True)]
    return problems + [f"{selector.name or '{' + selector.matchers + '}'} read without {label}"
                       for index, selector in _indexed_selectors(tokens)
                       if outside(index) and ":" not in selector.name]
