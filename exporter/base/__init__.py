"""Foundations every layer may use: the error hierarchy and one-line structured logs."""
