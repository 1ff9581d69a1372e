"""Reading the user's files with one-line errors, and writing files that are never half-written.

Every file a user names is read here: a missing file, a directory, a binary or
non-UTF-8 file, or one too large to be what it claims (``/dev/zero``) is a
:class:`SpecError` naming the file, not a traceback. Every file rightsize writes
goes through :func:`atomic_write_text`, and each command checks its output paths
with :func:`check_output_path` before any expensive work, so a path that cannot
be written costs nothing and clobbers nothing.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from rightsize.core.errors import SpecError

FILE_MODE = 0o644  # what ``open(path, "w")`` gives under the usual umask 022
#: Largest file read: far above the largest rightsize writes (a comm model with its boosters,
#: a few MiB); a bound so that ``/dev/zero`` or a disk image is refused, not read into memory.
MAX_INPUT_BYTES = 64 * 2**20


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


def check_output_path(path: str | Path, flag: str) -> Path:
    """Check, without writing anything, that :func:`atomic_write_text` can write ``path``.

    The file may exist (it is replaced whole); it must not be a directory, and its
    nearest existing parent must be a directory this process can create files in.

    Raises:
        SpecError: naming ``flag``, the path and the reason.
    """
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{flag} {path}: is a directory; give a file path inside it")
    _check_can_create(path.parent, path, flag)
    return path


def check_output_dir(path: str | Path, flag: str) -> Path:
    """Like :func:`check_output_path`, for a directory that files will be written into."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise SpecError(f"{flag} {path}: is a file, not a directory; choose another path")
    _check_can_create(path, path, flag)
    return path


def _check_can_create(directory: Path, path: Path, flag: str) -> None:
    """``directory``, or its nearest existing ancestor, must take new files: tested by creating
    and removing an anonymous file there, since permission bits do not tell root about
    read-only mounts or ``/proc``."""
    while not directory.exists() and directory != directory.parent:
        directory = directory.parent
    if not directory.is_dir():
        raise SpecError(
            f"{flag} {path}: {directory} is a file, not a directory; choose another path"
        )
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise SpecError(
            f"{flag} {path}: cannot write in {directory} ({exc.strerror or exc}); "
            "choose a writable path"
        ) from None


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of a user's file (``what`` names it in errors, e.g. ``"profile"``).

    Raises:
        SpecError: unreadable, a directory, larger than :data:`MAX_INPUT_BYTES`, or not UTF-8.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise SpecError(
            f"{what} {path} is larger than {MAX_INPUT_BYTES // 2**20} MiB; is it the right file?"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"{what} {path} is not UTF-8 text (byte {exc.start}); is it a binary file?"
        ) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping: PyYAML keeps the last
    silently, so a job file that says ``steps: 100`` and later ``steps: 5`` would run 5."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # ``<<: *anchor`` merges are YAML's own way to repeat keys
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: PyYAML's own error follows
                break
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path, what: str) -> Any:
    """A user's YAML file, parsed; a syntax error or a key given twice in one mapping is one
    line with its line number."""
    text = read_text(path, what)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise SpecError(f"{what} {path} is not valid YAML ({yaml_error_text(exc)})") from None


def yaml_error_text(exc: yaml.YAMLError) -> str:
    """``"line 3: mapping values are not allowed here"``: PyYAML's message is several lines
    with a caret drawing; the line and the problem are what a user needs."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}: " if mark else ""
    return where + (getattr(exc, "problem", None) or "invalid YAML")


def read_json(path: str | Path, what: str) -> Any:
    """A user's JSON file, parsed; a syntax error is one line with its line number."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{what} {path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
