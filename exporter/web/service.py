"""What the routes serve (App): the scraper, /metrics, the web config in force, the node page; each route's answer, guarded."""

from __future__ import annotations

from typing import Callable, Dict, NamedTuple, Optional, Tuple, Union

from prometheus_client import generate_latest

from exporter.exposition.sections import SectionFailures
from exporter.web.connections import ConnectionTable
from exporter.web.node_view import NodePage
from exporter.web.routes import HEALTH_PATH, INDEX_PATH, SELF_METRICS_PATH
from exporter.web.scrape import ScrapeBody
from exporter.web.self_metrics import SelfCollector, build_self_registry
from exporter.web.webconfig import WWW_AUTHENTICATE

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
PLAIN_TEXT = "text/plain; charset=utf-8"


class Answer(NamedTuple):
    """One request's answer, before HTTP: its status, body, type and headers of its own."""

    status: int
    body: Union[bytes, ScrapeBody]
    content_type: str
    headers: Tuple[Tuple[str, str], ...] = ()


NOT_FOUND = Answer(404, b"not found\n", PLAIN_TEXT)
UNAUTHORIZED = Answer(401, b"unauthorized\n", PLAIN_TEXT, (("WWW-Authenticate", WWW_AUTHENTICATE),))
# A route whose handler raised: one line, the why in the log (a body could leak what the log keeps).
FAILED = Answer(500, b"internal error: this route failed; the exporter's log says why\n", PLAIN_TEXT)
_NO_ROUTE = "(no route)"  # how the failure log names a path no route serves: a bounded key, not the client's path


class App:
    """What the routes serve; kept apart from the HTTP plumbing so handlers stay small."""

    def __init__(self, scraper, attribution, telemetry_path: str, web_config=None, collectors=None):
        self.scraper = scraper
        self.attribution = attribution
        self.telemetry_path = telemetry_path
        # A WebConfig, or a ReloadingWebConfig that keeps one current (its `current()`), or None.
        self._web_config = web_config
        # The collectors of this run (exporter/collectors/registry.Registry), known only by what it
        # answers: each source's state and each collector's part of /metrics; None: no collector.
        self._collectors = collectors  # the run's collectors.registry.Registry, or None
        self._self_collector = SelfCollector(scraper, attribution, collectors)
        self.registry = build_self_registry(self._self_collector)
        self._node_page = NodePage(scraper, attribution, telemetry_path, collectors)
        # Whatever a handler raises is answered 500 and logged once per route while it keeps failing the same
        # way: the process goes on and the connection stays (an exception let out would drop it unlogged).
        self._failures = SectionFailures("route", "is answered 500 until it works again")
        routes: Dict[str, Callable[[], Answer]] = {telemetry_path: self._telemetry}
        for path, route in ((SELF_METRICS_PATH, self._self_metrics), (HEALTH_PATH, self._health),
                            (INDEX_PATH, self._index)):
            routes.setdefault(path, route)
        self._routes = routes

    @property
    def web_config(self):
        """The web config in force now: asked for on every request and every new TLS connection."""
        config = self._web_config
        return config.current() if hasattr(config, "current") else config

    def source_states(self) -> list:
        """Every source's state, the core kubelet mapping's first: each with `name`, `up`, `reason` (why
        not up, one line) and `age_seconds` (how old its data is), as the registry reports them."""
        if self._collectors is None:
            return []
        return list(self._collectors.states())

    def count_connections(self, connections: ConnectionTable) -> None:
        """Expose the server's connection counters on /metrics."""
        self._self_collector.connections = connections

    def index_page(self) -> bytes:
        """The node page: this node's GPUs, their holders and the sources' states (source_states())."""
        return self._node_page.render(self.source_states())

    def answer(self, path: str, authorization: Optional[str]) -> Answer:
        """What a GET of `path` answers: 401 without the credentials the web config asks for it, 404 where
        no route serves it, and 500 (logged once while it keeps failing) when its handler raises."""
        route = self._routes.get(path)
        return self._failures.run(_NO_ROUTE if route is None else path, "handler",
                                  lambda: self._answer(path, route, authorization), lambda: FAILED)

    def _answer(self, path: str, route: Optional[Callable[[], Answer]], authorization: Optional[str]) -> Answer:
        config = self.web_config
        if config is not None and config.path_requires_auth(path) and not config.check_basic_auth(authorization):
            return UNAUTHORIZED
        return NOT_FOUND if route is None else route()

    def _telemetry(self) -> Answer:
        return Answer(200, self.scraper.scrape_body(), TEXT_FORMAT)

    def _self_metrics(self) -> Answer:
        return Answer(200, generate_latest(self.registry), TEXT_FORMAT)

    def _health(self) -> Answer:
        return Answer(200, b"ok\n", PLAIN_TEXT)

    def _index(self) -> Answer:
        return Answer(200, self.index_page(), "text/html; charset=utf-8")
