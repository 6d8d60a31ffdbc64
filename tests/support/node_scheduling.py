"""Which pods a selector picks and which nodes a DaemonSet's pods land on, as Kubernetes decides both."""

from __future__ import annotations

from typing import Any, Dict, List


def selects(selector: Dict[str, str], labels: Dict[str, str]) -> bool:
    """Equality-based selection, as a Service's selector and matchLabels select (an empty one selects nothing here)."""
    return bool(selector) and selector.items() <= labels.items()


def matches(expression: Dict[str, Any], labels: Dict[str, str]) -> bool:
    """One nodeSelectorRequirement against a node's labels, as the scheduler reads it."""
    key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
    return {"In": lambda: labels.get(key) in values, "NotIn": lambda: labels.get(key) not in values,
            "Exists": lambda: key in labels, "DoesNotExist": lambda: key not in labels}[operator]()


def schedules_on(daemonset: Dict[str, Any], node_labels: Dict[str, str]) -> bool:
    """The node selector, and the required node affinity (any term, every expression of it)."""
    spec = daemonset["spec"]["template"]["spec"]
    required = (spec.get("affinity", {}).get("nodeAffinity", {})
                .get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms"))
    return selects(spec["nodeSelector"], node_labels) and (
        required is None or any(all(matches(e, node_labels) for e in term.get("matchExpressions", ()))
                                for term in required))


def daemonsets_on(daemonsets: List[Dict[str, Any]], node_labels: Dict[str, str]) -> List[Dict[str, Any]]:
    """The DaemonSets that run a pod on a node with these labels."""
    return [d for d in daemonsets if schedules_on(d, node_labels)]
