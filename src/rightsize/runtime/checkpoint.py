"""Checkpoint files: where they live, how they are written (atomically) and pruned.

Layout under ``checkpoint.dir/JOB/`` (or ``checkpoint.url/JOB/``, an fsspec URL
every host of a cluster reaches): ``v000007/ps-0.pt`` (one file per parameter
server: its tensors, optimizer state and update log) or ``v000007/model.pt``
(allreduce: rank 0's model, optimizer and log). A version is
only used once the master has committed it to its state file, together with
the shard queues it belongs to; a version half-written by a node that died is
never read and is pruned later.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
import uuid
from pathlib import Path
from typing import Any

import torch

from rightsize.core.errors import SpecError

#: Committed versions kept on disk; older ones are deleted after each commit.
KEEP_VERSIONS = 2


def checkpoint_root(spec) -> str | Path:
    """Where a job's checkpoints go: ``checkpoint.url/NAME`` if set, else ``checkpoint.dir/NAME``."""
    if spec.checkpoint.url:
        return f"{spec.checkpoint.url.rstrip('/')}/{spec.name}"
    return spec.checkpoint.dir / spec.name


class CheckpointDir:
    """The files of one job's checkpoints, under ``root`` (``checkpoint.dir/JOB``, or
    ``checkpoint.url/JOB``): every location it gives is a string, a path or a URL, which
    nodes on other hosts are handed as is."""

    def __init__(self, root: str | Path) -> None:
        self.root = str(root).rstrip("/")

    def version_dir(self, version: int) -> str:
        return f"{self.root}/v{version:06d}"

    def ps_file(self, version: int, ps: str) -> str:
        return f"{self.version_dir(version)}/{ps}.pt"

    def model_file(self, version: int) -> str:
        return f"{self.version_dir(version)}/model.pt"

    def prune(self, keep: set[int]) -> None:
        """Delete every version directory not in ``keep``."""
        fs, root = _filesystem(self.root)
        if not fs.exists(root):
            return
        for path in fs.ls(root, detail=False):
            name = path.rstrip("/").rsplit("/", 1)[-1]
            if _VERSION.fullmatch(name) and int(name[1:]) not in keep:
                fs.rm(path, recursive=True)


_VERSION = re.compile(r"v\d{6}")


def is_url(location: str | Path) -> bool:
    return "://" in str(location)


def _filesystem(location: str | Path):
    """(fsspec filesystem, path within it) of a path or an fsspec URL."""
    import fsspec.core

    if is_url(location):
        return fsspec.core.url_to_fs(str(location))
    return fsspec.filesystem("file"), str(location)


def save_atomic(obj: Any, location: str | Path) -> None:
    """``torch.save`` to a temporary file beside ``location``, then move it into place: on a
    local disk fsync'd and renamed (atomic); at an fsspec URL written and moved (an object
    store's move is a copy — the master only reads a version it has committed, after every
    file of it was acknowledged, so no reader sees a half-written one)."""
    if is_url(location):
        fs, path = _filesystem(location)
        parent = path.rsplit("/", 1)[0]
        fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.{path.rsplit('/', 1)[-1]}.{uuid.uuid4().hex[:8]}"
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        try:
            with fs.open(tmp, "wb") as handle:
                handle.write(buffer.getvalue())
            fs.mv(tmp, path)
        except BaseException:
            if fs.exists(tmp):
                fs.rm(tmp)
            raise
        return
    path = Path(location)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def load(location: str | Path) -> Any:
    """Read a file written by :func:`save_atomic` (our own files: numpy logs included)."""
    if is_url(location):
        fs, path = _filesystem(location)
        with fs.open(path, "rb") as handle:
            data = io.BytesIO(handle.read())
        return torch.load(data, map_location="cpu", weights_only=False)
    return torch.load(location, map_location="cpu", weights_only=False)


def check_reachable(url: str, field: str = "checkpoint.url") -> None:
    """Create ``url`` if needed and prove a file can be written and read back there.

    Raises:
        SpecError: naming the field, the URL and the reason.
    """
    try:
        fs, path = _filesystem(url)
        fs.makedirs(path, exist_ok=True)
        probe = f"{path.rstrip('/')}/.probe-{uuid.uuid4().hex[:8]}"
        fs.pipe(probe, b"rightsize")
        fs.rm(probe)
    except (OSError, ValueError, ImportError) as exc:
        raise SpecError(f"{field}: cannot write to {url} ({exc}); choose a location every "
                        f"host can write") from None  # fmt: skip


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
