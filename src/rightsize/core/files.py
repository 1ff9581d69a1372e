"""Writing files so that a crash or an error never leaves half a file behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

FILE_MODE = 0o644  # what ``open(path, "w")`` gives under the usual umask 022


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it into place.

    The file gets :data:`FILE_MODE`, not the owner-only mode ``mkstemp`` creates its
    temporary with: reports, profiles and plans are meant to be read by others.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
