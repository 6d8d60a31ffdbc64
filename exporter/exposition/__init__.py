"""Exposition: the line-level rewrite of Prometheus text; values are never parsed and rendered again."""
