"""Autoscaling policies: pure decisions from observations of one job (see api.py)."""
