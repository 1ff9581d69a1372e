"""A user's script, checked before anything is launched: it exists and it parses.

``rightsize torchrun train.py`` with a typo in the path, or a script with a syntax
error, should fail in one line and exit 2 (as any bad input does) — not after the
ranks were started, each failed and restarted ``--max-restarts`` times. A script
that parses but fails when it runs is caught by :mod:`script_group` (its ranks
exit non-zero before their first step on the first launch).
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from rightsize.core.errors import SpecError
from rightsize.core.files import read_text
from rightsize.core.spec import JobSpec


def check_script(spec: JobSpec) -> None:
    """Raises SpecError: the script (or module) cannot be found, read or compiled."""
    if spec.module:
        try:
            found = importlib.util.find_spec(spec.script)
        except (ImportError, ValueError):
            found = None
        if found is None:
            raise SpecError(f"script: no module named {spec.script!r} (with -m, name an "
                            "importable module, e.g. my_pkg.train)")  # fmt: skip
        return
    path = Path(spec.script)
    source = read_text(path, "script")
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise SpecError(f"script: {spec.script} line {exc.lineno}: {exc.msg}") from None


def script_label(spec: JobSpec) -> str:
    """What a script job trains, for the store's history: the script's name and a hash of its
    text (``script:train.py@1a2b3c4d5e6f``; a module: ``module:pkg.train``), so that runs of
    the same script find each other and an edited script starts afresh."""
    if spec.module:
        return f"module:{spec.script}"[:200]
    try:
        text = Path(spec.script).read_bytes()
    except OSError:
        text = b""
    digest = hashlib.sha256(text).hexdigest()[:12]
    return f"script:{Path(spec.script).name}@{digest}"[:200]


def args_label(spec: JobSpec) -> str:
    """The script's arguments, as the store's ``dataset`` of a script job (what its data is
    is the script's business; its arguments tell runs apart)."""
    return " ".join(spec.args)[:200]
