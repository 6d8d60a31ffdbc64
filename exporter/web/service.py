"""What the routes serve (App): the scraper, the self-metrics registry, the web config in force, the node page."""

from __future__ import annotations

from exporter.web.connections import ConnectionTable
from exporter.web.node_view import NodePage
from exporter.web.self_metrics import SelfCollector, build_self_registry


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
