"""Collectors: each source that can be switched on, one object registered once (registry.COLLECTORS)."""
