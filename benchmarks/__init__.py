"""rightsize's benchmarks: ``lib/`` (what every script shares) and one folder per area.

Every script runs from the repo root as ``.venv/bin/python benchmarks/<area>/<script>.py``;
each puts the repo root on ``sys.path`` first (see ``lib/__init__.py``), so it imports its
shared code as ``benchmarks.lib....`` and a neighbour as ``benchmarks.<area>.<script>``.
"""
