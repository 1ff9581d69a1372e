"""Files uploaded from the web pages and ``rightsize submit``: a user's own model or training
script, run only for its owner and only inside its job's cgroups.

A **training script** (``POST /scripts``, issue 37) is a torchrun script a job runs
unchanged on every rank (``script: upload:NAME.py``). It is checked by parsing, never
run by the service, kept in the owner's ``scripts`` folder, and run only by that
owner's jobs, each rank in its own cgroup (the job's master only compiles it).

FC2's users "upload their code" (§4.1). An upload is one Python file defining a workload
factory (a function returning a ``rightsize.workloads.Workload``, as ``rightsize run``
takes with ``workload: package.module:function``). The service never imports it: it
checks the file without running it (it parses, and defines the named function at top
level; a 422 names ``source`` or ``factory`` otherwise) and keeps it as module
``rs_upload_<owner>_<name>`` in a directory of the owner's own. Only a job of that owner
may name it (anyone else's is a 422 on ``workload``), and only that job's processes
have the directory on their import path. The job's runner — whose master builds the
workload to size its nodes — starts inside a cgroup capped at the job's budget, and its
nodes each in their own (the local backend's), so the uploaded code runs only within
what the job was given.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rightsize.core.errors import SpecError

#: An uploaded file's module: ``rs_upload_<owner id>_<name>``.
PREFIX = "rs_upload_"
MODULE = re.compile(rf"^{PREFIX}(\d+)_([a-z][a-z0-9_]*)$")
#: At most this many characters of source (a model file, not a dataset).
MAX_SOURCE_CHARS = 1_000_000


#: A job names an uploaded script as ``upload:NAME.py``.
SCRIPT_PREFIX = "upload:"


class ScriptUpload(BaseModel):
    """``POST /scripts``: a training script a job runs on every rank."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,59}\.py$",
                      description="the file's name, e.g. train.py")  # fmt: skip
    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS, description="the file")


class WorkloadUpload(BaseModel):
    """``POST /workloads``: a Python file defining a workload factory."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$",
                      description="the module's name: lower-case letters, digits, _")  # fmt: skip
    source: str = Field(min_length=1, max_length=MAX_SOURCE_CHARS, description="the file")
    factory: str = Field(default="make_workload", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$",
                         description="the function that returns the Workload")  # fmt: skip


def check_source(source: str, factory: str) -> None:
    """The file parses and defines ``factory`` at top level — checked without running it.

    Raises:
        SpecError: ``source: line N: ...`` or ``factory: ...``.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise SpecError(f"line {exc.lineno}: {exc.msg}", field="source") from None
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    if factory not in functions:
        defined = ", ".join(functions) or "none"
        raise SpecError(f"the file defines no top-level function {factory!r} "
                        f"(its functions: {defined})", field="factory")  # fmt: skip


class Uploads:
    """The uploaded workload files under ``directory``, one folder per owner."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def folder(self, owner_id: int) -> Path:
        return self.directory / str(owner_id)

    def save(self, owner_id: int, upload: WorkloadUpload) -> str:
        """Keep the checked file; the ``workload`` a job file names it by."""
        check_source(upload.source, upload.factory)
        module = f"{PREFIX}{owner_id}_{upload.name}"
        folder = self.folder(owner_id)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{module}.py").write_text(upload.source)
        return f"{module}:{upload.factory}"

    def save_script(self, owner_id: int, upload: ScriptUpload) -> str:
        """Keep the checked script; the ``script`` a job file names it by.

        Raises:
            SpecError: ``source: line N: ...`` (it does not parse).
        """
        try:
            ast.parse(upload.source)
        except SyntaxError as exc:
            raise SpecError(f"line {exc.lineno}: {exc.msg}", field="source") from None
        folder = self.folder(owner_id) / "scripts"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / upload.name).write_text(upload.source)
        return f"{SCRIPT_PREFIX}{upload.name}"

    def script_path(self, script: str, owner_id: int | None) -> Path:
        """The file a job of ``owner_id`` runs for ``script`` (``upload:NAME.py``).

        Raises:
            SpecError: not an uploaded script (the service runs no other), or none of that name.
        """
        name = script.removeprefix(SCRIPT_PREFIX)
        if not script.startswith(SCRIPT_PREFIX) or owner_id is None:
            raise SpecError(f"{script!r}: a job on the service runs a script uploaded "
                            f"first (POST /scripts: {SCRIPT_PREFIX}NAME.py; rightsize submit "
                            "uploads a job file's script for you)", field="script")  # fmt: skip
        path = self.folder(owner_id) / "scripts" / name
        if "/" in name or not path.is_file():
            raise SpecError(f"no uploaded script {name!r}; upload it first", field="script")
        return path

    def folder_of(self, workload: str) -> Path | None:
        """The folder an uploaded ``workload`` is imported from (None: not an upload)."""
        found = MODULE.match(workload.partition(":")[0])
        return self.folder(int(found.group(1))) if found else None

    def check_use(self, workload: str, owner_id: int | None) -> Path | None:
        """The folder a job of ``owner_id`` naming ``workload`` imports from (None: not an
        upload).

        Raises:
            SpecError: another owner's upload, or one that does not exist.
        """
        module = workload.partition(":")[0]
        found = MODULE.match(module)
        if found is None:
            return None
        if owner_id is None or int(found.group(1)) != owner_id:
            raise SpecError(f"{module!r} is not one of your uploaded workloads", field="workload")
        if not (self.folder(owner_id) / f"{module}.py").is_file():
            raise SpecError(f"no uploaded file {module!r}; upload it first", field="workload")
        return self.folder(owner_id)


def runner_cgroup(name: str, budget):
    """A cgroup capped at ``budget`` for the runner of a job that runs uploaded code, made
    now (a ``NodeCgroup``: the runner writes itself into its ``procs_files`` before it
    executes; the allocator removes it when the runner ends).

    Raises:
        SpecError: this machine gives no cgroups to put it in (the upload is not run).
    """
    import os

    from rightsize.runtime.backends.cgroups import CgroupUnavailable, NodeCgroup, detect

    try:
        cgroup = NodeCgroup(detect(), Path("rightsize") / f"{os.getpid()}-uploads" / name)
        cgroup.create()
        cgroup.set_cpu(budget.cpu_cores)
        cgroup.set_memory(budget.memory_bytes)
    except (CgroupUnavailable, OSError) as exc:
        raise SpecError(f"uploaded code runs only inside cgroups, and this machine "
                        f"gives none ({exc})", field="workload") from None
    return cgroup
