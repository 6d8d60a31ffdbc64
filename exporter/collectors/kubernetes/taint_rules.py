"""DeviceTaintRules (resource.k8s.io): cluster-wide taints on DRA devices, which join their ResourceSlice's own.

A rule's taint applies to every device its `spec.deviceSelector` (driver, pool, device; each optional)
selects, in the API server's and the scheduler's memory only: the stored ResourceSlice never changes, so
the slice watch alone misses them. The rules are read at whichever version the server serves (v1 from
Kubernetes 1.37, v1beta2 in 1.36, v1alpha3 in 1.33-1.35), which one read of aggregated discovery says, and
watched like the slices; a cluster that serves none of them, or an RBAC that refuses them, is asked again
after UNAVAILABLE_SECONDS. See docs/health.md.
"""

from __future__ import annotations

import threading
from typing import Callable, Dict, NamedTuple, Optional, Tuple

from exporter.base.logs import LogOnce
from exporter.collectors.kubernetes.api_discovery import served_versions
from exporter.collectors.kubernetes.dra import taint_of
from exporter.collectors.kubernetes.objects import Skipped, cluster_object_check
from exporter.collectors.kubernetes.stream import ANSWER_SECONDS, http_client
from exporter.collectors.kubernetes.watch import WATCH_SILENCE_SECONDS, ListWatch, describe_failure

GROUP = "resource.k8s.io"
RESOURCE_NAME = "devicetaintrules"
VERSIONS = ("v1", "v1beta2", "v1alpha3")  # preferred first
# A kind not served (no version of it, or its feature gate off) or refused by RBAC: asked for again after this
# long, so that a cluster without DeviceTaintRules costs one discovery read every ten minutes.
UNAVAILABLE_SECONDS = 600.0
MAX_RULES = 4096  # rules kept; a cluster with more keeps the first MAX_RULES (logged once)

Taint = Tuple[str, str, str]  # (key, value, effect), as the ResourceSlice taints are kept (dra.taint_of)


class TaintRule(NamedTuple):
    """One rule: its selector's fields (None: any) and its taint. A rule without a selector selects every
    device, as the scheduler's taint tracker applies it (its type's comment says none: we follow what the
    scheduler and the eviction controller do, since that is what the taint does to pods)."""

    driver: Optional[str]
    pool: Optional[str]
    device: Optional[str]
    taint: Taint

    def selects(self, driver: str, pool: str, device: str) -> bool:
        return ((self.driver is None or self.driver == driver) and (self.pool is None or self.pool == pool)
                and (self.device is None or self.device == device))


def taint_rule(obj) -> TaintRule:
    """The rule of a decoded DeviceTaintRule (any version: their spec fields are the same)."""
    spec = obj.spec
    selector = spec.deviceSelector
    taint = spec.taint
    found = taint_of(taint)  # as a slice's own taints are read
    if selector is None:
        return TaintRule(None, None, None, found)
    return TaintRule(selector.driver or None, selector.pool or None, selector.device or None, found)


def rule_check(obj) -> None:
    """Raises Skipped for a rule we cannot read, or one that selects by what we cannot evaluate: the device
    class or CEL selectors of Kubernetes 1.33-1.34's v1alpha3 (applied as if absent, such a rule would taint
    devices it does not select)."""
    cluster_object_check(obj)
    spec = getattr(obj, "spec", None)
    taint = getattr(spec, "taint", None)
    if taint is None or not isinstance(taint.key, str) or not taint.key:
        raise Skipped("malformed", "no spec.taint.key")
    selector = spec.deviceSelector
    if getattr(selector, "deviceClassName", None) or getattr(selector, "selectors", None):
        raise Skipped("unsupported", "spec.deviceSelector selects by deviceClassName or CEL selectors, "
                                     "which the exporter does not evaluate")


class DeviceTaintRules:
    """The cluster's rules by name, fed by a ListWatch (watch.WatchedStore); read on the mapping refresher."""

    def __init__(self):
        self._lock = threading.Lock()
        self._rules: Dict[str, TaintRule] = {}
        self._logged = LogOnce()

    def replace(self, rules: list, complete: bool = True) -> None:
        kept: Dict[str, TaintRule] = {}
        for rule in rules:
            if len(kept) >= MAX_RULES:
                self._too_many()
                break
            kept[rule.metadata.name] = taint_rule(rule)
        with self._lock:
            self._rules = kept

    def add(self, rule) -> None:
        with self._lock:
            if rule.metadata.name in self._rules or len(self._rules) < MAX_RULES:
                self._rules[rule.metadata.name] = taint_rule(rule)
                return
        self._too_many()

    update = add

    def delete(self, rule) -> None:
        with self._lock:
            self._rules.pop(rule.metadata.name, None)

    def clear(self) -> None:
        """The kind is no longer served, or no longer readable: no rule is known to apply."""
        with self._lock:
            self._rules = {}

    def taints_for(self, driver: str, pool: str, device: str) -> Tuple[Taint, ...]:
        """The taints of every rule that selects this device, sorted, each once."""
        with self._lock:
            rules = list(self._rules.values())
        return tuple(sorted({rule.taint for rule in rules if rule.selects(driver, pool, device)}))

    def __len__(self) -> int:
        with self._lock:
            return len(self._rules)

    def _too_many(self) -> None:
        self._logged.log("too_many", "warn", f"more than {MAX_RULES} DeviceTaintRules: the others are not read",
                         dependency="kubernetes-api", resource=RESOURCE_NAME)


def rule_resource(version: str):
    """lightkube's DeviceTaintRule of one API version; imported only when asked (each version's models cost RSS).
    v1alpha3 is read with the device class and CEL selectors 1.33-1.34 still had, so that rule_check sees them."""
    import importlib

    module = importlib.import_module(f"lightkube.resources.resource_{version}")
    return _with_old_selectors(module.DeviceTaintRule) if version == "v1alpha3" else module.DeviceTaintRule


_OLD_SELECTOR_RESOURCE = []  # the v1alpha3 resource with the old selector fields, made once


def _with_old_selectors(resource):
    if not _OLD_SELECTOR_RESOURCE:
        from typing import Any, List

        import msgspec
        from lightkube.models import resource_v1alpha3 as models

        # defstruct, not class statements: this module's annotations are strings, which a class made in a
        # function could not resolve.
        selector = msgspec.defstruct("DeviceTaintSelector", [("deviceClassName", Optional[str], None),
                                                             ("selectors", Optional[List[Any]], None)],
                                     bases=(models.DeviceTaintSelector,), kw_only=True)
        spec = msgspec.defstruct("DeviceTaintRuleSpec", [("deviceSelector", Optional[selector], None)],
                                 bases=(models.DeviceTaintRuleSpec,), kw_only=True)
        _OLD_SELECTOR_RESOURCE.append(msgspec.defstruct("DeviceTaintRule", [("spec", spec)], bases=(resource,),
                                                        kw_only=True))
    return _OLD_SELECTOR_RESOURCE[0]


class RulesNotServed(Exception):
    """Aggregated discovery lists no version of DeviceTaintRules that we read."""


class _Stopped(Exception):
    """The watch was stopped while waiting for a request token."""


class TaintRuleWatch(ListWatch):
    """The rules' ListWatch. Before the first list, and again after a pause for a 404, one read of aggregated
    discovery (api_discovery) picks the first of VERSIONS the server serves; a server without aggregated
    discovery has each version listed in turn on a 404. When none is served, the chosen version's list
    answers 404 (a feature gate turned off since), or RBAC refuses the list or watch (403), the reason is
    logged once and nothing is asked for UNAVAILABLE_SECONDS (not the backoff a failing pod watch gets: most
    clusters lack the kind): a cluster without the kind costs one discovery read per pause, one refusing it
    one list. Meanwhile no rule is served, but those a list got when only the watch is refused."""

    def __init__(self, client, store: DeviceTaintRules, silence_seconds: float = WATCH_SILENCE_SECONDS,
                 resource_for: Callable[[str], object] = rule_resource,
                 unavailable_seconds: float = UNAVAILABLE_SECONDS, read_seconds: float = ANSWER_SECONDS):
        super().__init__(client, resource_for(VERSIONS[0]), RESOURCE_NAME, None, store, namespaced=False,
                         check=rule_check, silence_seconds=silence_seconds)
        self._rules = store
        self._resource_for = resource_for
        self._unavailable_seconds = unavailable_seconds
        self._read_seconds = read_seconds
        self._version_at = 0
        self._discover_next = True  # before the next list: read discovery (at start, and after each pause)
        self._walking = False  # no aggregated discovery: the next version is listed on a 404
        self._unavailable_logged = LogOnce()

    @property
    def version(self) -> str:
        """The API version read now (or tried next)."""
        return VERSIONS[self._version_at]

    def _list(self) -> str:
        if self._discover_next:
            self._discover()  # on the token _run took for the list: the list takes one of its own
            self._discover_next = False
            if not self._budget.take(self._stop):
                raise _Stopped()
        return super()._list()

    def _discover(self) -> None:
        """Pick the version to list; RulesNotServed when discovery lists none of VERSIONS."""
        try:
            served = served_versions(http_client(self._client), GROUP, RESOURCE_NAME, self._read_seconds)
        except Exception as exc:  # noqa: BLE001 - discovery only spares requests: without it, walk the versions
            self._unavailable_logged.log(("discovery", type(exc).__name__), "info",
                                         "Kubernetes API discovery unreadable: listing each DeviceTaintRule "
                                         "version in turn", dependency="kubernetes-api",
                                         detail=f"{type(exc).__name__}: {exc}"[:200])
            served = None
        self._walking = served is None
        if served is not None and not any(version in served for version in VERSIONS):
            raise RulesNotServed()
        self._version_at = 0 if served is None else next(i for i, v in enumerate(VERSIONS) if v in served)
        self._resource = self._resource_for(self.version)

    def _failed(self, exc: BaseException, verb: str) -> bool:
        if isinstance(exc, _Stopped):
            return False
        reason = "not_found" if isinstance(exc, RulesNotServed) else describe_failure(exc, verb, RESOURCE_NAME)[0]
        if reason == "not_found" and self._walking and self._version_at + 1 < len(VERSIONS):
            self._version_at += 1
            self._resource = self._resource_for(self.version)
            return False  # listed again at once, in the older version
        if reason not in ("forbidden", "not_found"):
            return super()._failed(exc, verb)
        self._unavailable(verb, reason)
        self._stop.wait(self._unavailable_seconds)  # the pause itself, here: _run's is the backoff's
        return False

    def _unavailable(self, verb: str, reason: str) -> None:
        if reason == "not_found" or verb == "list":
            self._rules.clear()  # (a ClusterRole that grants list but not watch: the list's rules, until the next)
        self._health.failed(verb, False)
        if reason == "not_found":
            self._discover_next = True  # a version served since, or a gate turned off, shows there first
            self._unavailable_logged.log("not_served", "info", "DeviceTaintRules are not served (resource.k8s.io "
                                         f"{', '.join(VERSIONS)}): only the ResourceSlices' own taints are served",
                                         dependency="kubernetes-api", retry_seconds=self._unavailable_seconds)
        else:  # the version served stays the one listed: one list per pause
            self._unavailable_logged.log("forbidden", "warn", f"Kubernetes API forbids {verb} on {RESOURCE_NAME} "
                                         f"(403): the exporter's ClusterRole needs verbs 'list' and 'watch' on "
                                         f"'{RESOURCE_NAME}' in API group '{GROUP}' (the chart's ClusterRole: docs/kubernetes.md#rbac); "
                                         "only the ResourceSlices' own taints are served",
                                         dependency="kubernetes-api", retry_seconds=self._unavailable_seconds)
