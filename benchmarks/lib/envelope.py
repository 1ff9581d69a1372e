"""The JSON envelope every result file has, and writing a result file atomically.

A result is read months later beside the docs' numbers; the envelope says how to rerun it
(the command as typed at the repo root), when it ran, at which commit, and on what machine.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from rightsize.core.files import atomic_write_text

#: The repo root: commands in the envelope are written relative to it, as docs print them.
ROOT = Path(__file__).resolve().parents[2]


def command(args: list[str] | None = None) -> str:
    """The command that reruns this process's benchmark from the repo root: the script
    ``sys.argv`` names, with ``args`` (a ``main(argv)``'s own) or else ``sys.argv``'s."""
    script = sys.argv[0]
    path = Path(script).resolve()
    shown = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else script
    return " ".join([".venv/bin/python", shown, *(sys.argv[1:] if args is None else args)])


def commit() -> str | None:
    """The checkout's commit (None outside a git checkout: the envelope is still written)."""
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def machine() -> dict:
    """The CPU model, its cores, and the versions that move numbers (torch only if the
    benchmark loaded it: importing it here would cost a light benchmark seconds)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    found = {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}
    torch = sys.modules.get("torch")
    if torch is not None:
        found["torch"] = torch.__version__
    return found


def envelope(args: list[str] | None = None) -> dict:
    """The fields every result file starts with (``args``: as ``command`` takes them)."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    return {"command": command(args), "date": now.isoformat(), "commit": commit(),
            "machine": machine()}  # fmt: skip


def write_report(out: str | Path, report: dict, indent: int = 2,
                 args: list[str] | None = None) -> Path:  # fmt: skip
    """Write ``report`` inside the envelope as indented JSON, atomically (a benchmark stopped
    midway leaves the previous results whole), creating the folder. A key the report sets
    itself wins over the envelope's."""
    return atomic_write_text(out, json.dumps({**envelope(args), **report}, indent=indent) + "\n")
