"""Checkpoint files: where they live, how they are written (atomically) and pruned.

Layout under ``checkpoint.dir/JOB/``: ``v000007/ps-0.pt`` (one file per
parameter server: its tensors, optimizer state and update log) or
``v000007/model.pt`` (allreduce: rank 0's model, optimizer and log), and
``exports/g000003/`` for the hand-over files of a PS repartition. A version is
only used once the master has committed it to its state file, together with
the shard queues it belongs to; a version half-written by a node that died is
never read and is pruned later.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from rightsize.core.errors import SpecError

#: Committed versions kept on disk; older ones are deleted after each commit.
KEEP_VERSIONS = 2


class CheckpointDir:
    """The files of one job's checkpoints, under ``root`` (``checkpoint.dir/JOB``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def version_dir(self, version: int) -> Path:
        return self.root / f"v{version:06d}"

    def ps_file(self, version: int, ps: str) -> Path:
        return self.version_dir(version) / f"{ps}.pt"

    def model_file(self, version: int) -> Path:
        return self.version_dir(version) / "model.pt"

    def export_file(self, generation: int, ps: str) -> Path:
        return self.root / "exports" / f"g{generation:06d}" / f"{ps}.pt"

    def prune(self, keep: set[int]) -> None:
        """Delete every version directory not in ``keep``, and old exports."""
        if not self.root.exists():
            return
        for path in self.root.glob("v*"):
            if path.is_dir() and int(path.name[1:]) not in keep:
                shutil.rmtree(path, ignore_errors=True)

    def prune_exports(self, keep_generation: int | None = None) -> None:
        for path in (self.root / "exports").glob("g*"):
            if keep_generation is None or int(path.name[1:]) != keep_generation:
                shutil.rmtree(path, ignore_errors=True)


def save_atomic(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file in the same directory, fsync, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: Path) -> Any:
    """Read a file written by :func:`save_atomic` (our own files: numpy logs included)."""
    return torch.load(path, map_location="cpu", weights_only=False)


def check_writable(directory: Path, field: str = "checkpoint.dir") -> None:
    """Create ``directory`` if needed and prove a file can be written there.

    Raises:
        SpecError: naming the field, the directory and the reason.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SpecError(
            f"{field}: cannot write to {directory} ({reason}); choose a writable directory"
        ) from None
