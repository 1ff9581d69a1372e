"""Shared-memory segments' names, and unlinking those of processes that ended.

Apart from :mod:`sharedmem` (which needs torch) so that a backend can clean up after
its nodes without importing torch: the Ray backend's actors run it on every host.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from rightsize.core.processes import pid_alive

#: Where segments live: a tmpfs every process of the host can map.
SHM_DIR = Path("/dev/shm")
#: Every segment's name starts with this.
PREFIX = "rightsize"

SEGMENT_NAME = re.compile(rf"{PREFIX}\.(\d+)\.[0-9a-f]+\.[A-Za-z0-9._-]+")


def owner_pid(name: str) -> int | None:
    """The pid of the process that created segment ``name`` (None: not a segment's name)."""
    match = SEGMENT_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def remove_segments(pid: int, directory: Path = SHM_DIR) -> int:
    """Unlink every segment process ``pid`` created (it has ended); returns how many."""
    return _unlink(p for p in directory.glob(f"{PREFIX}.{pid}.*") if owner_pid(p.name) == pid)


def sweep_stale(directory: Path = SHM_DIR, alive: Callable[[int], bool] | None = None) -> int:
    """Unlink segments whose creator is dead (left by nodes of a killed master)."""
    alive = alive or pid_alive
    stale = []
    for path in directory.glob(f"{PREFIX}.*") if directory.is_dir() else []:
        pid = owner_pid(path.name)
        if pid is not None and not alive(pid):
            stale.append(path)
    return _unlink(stale)


def _unlink(paths) -> int:
    count = 0
    for path in paths:
        try:
            path.unlink()
            count += 1
        except FileNotFoundError:
            pass
    return count

