"""AMD's collectors: the reader of its metrics exporter, and its identity and health service."""
