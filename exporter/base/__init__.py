"""Foundations every layer may use: the error hierarchy, one-line structured logs, a retrying cache."""
