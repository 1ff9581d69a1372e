"""Helpers for the service's tests: stores on SQLite and (where CI provides one) PostgreSQL,
and what the kernel holds for the service's jobs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

#: CI starts PostgreSQL and sets this (.ci/run); elsewhere those tests skip.
ENV_POSTGRES = "RIGHTSIZE_TEST_POSTGRES"


def postgres_url() -> str | None:
    return os.environ.get(ENV_POSTGRES)


def fresh_postgres() -> str:
    """A new, empty database on the test server (dropped with the server, never reused)."""
    url = postgres_url()
    if not url:
        pytest.skip(f"no PostgreSQL: set {ENV_POSTGRES}=postgresql://... (CI does)")
    import psycopg

    name = f"rs_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + f"/{name}"


def database_urls(tmp_path: Path) -> dict[str, str]:
    urls = {"sqlite": str(tmp_path / "store.db")}
    if postgres_url():
        urls["postgresql"] = fresh_postgres()
    return urls


def held_cpu_cores(masters: set[int]) -> float | None:
    """The CPU quotas the kernel enforces now on the node cgroups (with a live process) of
    the jobs whose masters are the processes ``masters`` — what is applied, not what the
    books say; other jobs on the machine are not counted. None without cgroups."""
    from rightsize.runtime.backends.cgroups import CgroupUnavailable, detect, held_by_masters

    try:
        hierarchy = detect()
    except CgroupUnavailable:
        return None
    return sum(cores for pid, (cores, _) in held_by_masters(hierarchy).items() if pid in masters)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve(database: Path, port: int, log: Path, cpu: float = 1) -> subprocess.Popen:
    """``rightsize serve`` on 127.0.0.1:``port`` over ``database``, ``cpu`` cores of capacity."""
    return subprocess.Popen(
        [sys.executable, "-m", "rightsize", "serve", "--database", str(database), "--port",
         str(port), "--cpu", str(cpu), "--workdir", str(database.parent / "work")],
        stdout=open(log, "ab"), stderr=subprocess.STDOUT,
    )  # fmt: skip
