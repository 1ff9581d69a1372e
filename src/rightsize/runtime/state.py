"""The master's durable state in one SQLite file, so a restarted master resumes the job.

What is kept: the job (its spec, status, how many masters have run it), the
timeline of shapes (every change with its action, reason and measured
transition time — the current shape is the last row), committed checkpoints
(version, the shard queues they belong to, the files, the tensor placement),
node events (failures, OOM kills), metric samples, and a script job's sample
ledger (which of its checkpoint files hold which samples). A checkpoint row is
written in one transaction, so a version is either fully committed with its
shard snapshot or absent. Only the master writes; WAL mode lets a test or a
dashboard read while it runs.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from rightsize.core.errors import SpecError
from rightsize.core.shape import ClusterShape

_SCHEMA = """
CREATE TABLE IF NOT EXISTS job (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    name TEXT, spec TEXT, identity TEXT, status TEXT,
    started_at REAL, finished_s REAL, masters INTEGER, generation INTEGER, isolation TEXT
);
CREATE TABLE IF NOT EXISTS timeline (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, time_s REAL, action TEXT, reason TEXT,
    shape TEXT, applied INTEGER, transition_s REAL, details TEXT, notes TEXT
);
CREATE TABLE IF NOT EXISTS checkpoints (
    version INTEGER PRIMARY KEY, time_s REAL, shards TEXT, files TEXT, placement TEXT,
    steps INTEGER
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, time_s REAL, node TEXT, kind TEXT, detail TEXT
);
CREATE TABLE IF NOT EXISTS samples (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, time_s REAL, data TEXT
);
CREATE TABLE IF NOT EXISTS ledger (
    id INTEGER PRIMARY KEY CHECK (id = 1), data TEXT
);
"""


class JobStatus(StrEnum):
    """A job's status in its state file; every one but ``finished`` is resumed by a rerun."""

    RUNNING = "running"  # a master is on it, or was killed while on it
    INTERRUPTED = "interrupted"  # stopped by SIGINT/SIGTERM after a checkpoint
    FAILED = "failed"  # a node failed too often, or a node never started
    FINISHED = "finished"

    @property
    def resumable(self) -> bool:
        return self != JobStatus.FINISHED


@dataclass(frozen=True)
class CheckpointRow:
    """A committed checkpoint: its files and the shard queues and placement it goes with."""

    version: int
    time_s: float
    shards: dict[str, Any]
    files: dict[str, str]  # holder (ps name, or "model") -> path
    placement: dict[str, str]
    steps: int


@dataclass(frozen=True)
class LaunchRow:
    """The first timeline row of a job: the shape it starts with, and why."""

    shape: ClusterShape
    action: str
    reason: str
    notes: dict | None = None


class StateStore:
    """Reads and writes the state file. One instance per master."""

    def __init__(self, path: Path) -> None:
        """Open (or create) the state file.

        Raises:
            SpecError: the file is not a state file (another program's, or damaged).
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
            self.db.execute("SELECT name, spec, identity, status FROM job LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise SpecError(
                f"runtime.state: {path} is not a rightsize state file ({exc}); move it away or "
                "set runtime.state to another file"
            ) from None

    def close(self) -> None:
        self.db.close()

    # -- the job --------------------------------------------------------------------
    def job(self) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT name, spec, identity, status, started_at, finished_s, masters, generation, "
            "isolation FROM job WHERE id = 1"
        ).fetchone()
        if row is None:
            return None
        keys = ("name", "spec", "identity", "status", "started_at", "finished_s", "masters",
                "generation", "isolation")  # fmt: skip
        job = dict(zip(keys, row, strict=True))
        job["spec"] = json.loads(job["spec"])
        return job

    def start_job(self, name: str, spec: dict, identity: str, started_at: float,
                  launch: LaunchRow) -> int:  # fmt: skip
        """Begin a new job in this file, forgetting any previous one, with its launch row.

        The job and the shape it launches with are written in one transaction, before
        any node starts, so a master killed at any moment after leaves a job its
        successor can resume. Returns the launch row's ``seq`` (its transition time is
        filled in once the nodes run: :meth:`set_transition`).
        """
        self.db.execute("BEGIN")
        try:
            for table in ("job", "timeline", "checkpoints", "events", "samples"):
                self.db.execute(f"DELETE FROM {table}")
            self.db.execute(
                "INSERT INTO job VALUES (1, ?, ?, ?, ?, ?, NULL, 1, 0, NULL)",
                (name, json.dumps(spec), identity, str(JobStatus.RUNNING), started_at),
            )
            seq = self.record_shape(0.0, launch.action, launch.reason, launch.shape,
                                    notes=launch.notes)  # fmt: skip
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return seq

    def update_job(self, **fields: Any) -> None:
        columns = ", ".join(f"{key} = ?" for key in fields)
        self.db.execute(f"UPDATE job SET {columns} WHERE id = 1", tuple(fields.values()))

    # -- the timeline ---------------------------------------------------------------
    def record_shape(
        self,
        time_s: float,
        action: str,
        reason: str,
        shape: ClusterShape,
        applied: bool = True,
        transition_s: float | None = None,
        details: dict | None = None,
        notes: dict | None = None,
    ) -> int:
        """One timeline row; ``details`` are the mechanism's timings, ``notes`` the plan's own.
        Returns its ``seq``."""
        cursor = self.db.execute(
            "INSERT INTO timeline (time_s, action, reason, shape, applied, transition_s, details, "
            "notes) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (time_s, action, reason, json.dumps(shape.to_dict()), int(applied), transition_s,
             json.dumps(details or {}), json.dumps(notes or {})),
        )  # fmt: skip
        return cursor.lastrowid

    def repeats_last(self, action: str, reason: str, shape: ClusterShape) -> bool:
        """Whether the latest timeline row is this same plan, declined: a policy that asks for
        the same thing every interval is one row, not one per metric sample."""
        row = self.db.execute(
            "SELECT action, reason, shape, applied FROM timeline ORDER BY seq DESC LIMIT 1"
        ).fetchone()  # fmt: skip
        return (row is not None and not row[3] and (row[0], row[1]) == (action, reason)
                and row[2] == json.dumps(shape.to_dict()))  # fmt: skip

    def set_transition(self, seq: int, transition_s: float, details: dict, reason: str) -> None:
        """Fill in a row written before its change was carried out."""
        self.db.execute(
            "UPDATE timeline SET transition_s = ?, details = ?, reason = ? WHERE seq = ?",
            (transition_s, json.dumps(details), reason, seq),
        )

    def timeline(self) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT time_s, action, reason, shape, applied, transition_s, details, notes "
            "FROM timeline ORDER BY seq"
        ).fetchall()
        return [
            {"time_s": t, "action": a, "reason": r, "shape": json.loads(s), "applied": bool(ok),
             "transition_s": tr, "details": json.loads(d), "notes": json.loads(n)}
            for t, a, r, s, ok, tr, d, n in rows
        ]  # fmt: skip

    def current_shape(self) -> ClusterShape | None:
        row = self.db.execute(
            "SELECT shape FROM timeline WHERE applied = 1 ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return ClusterShape.from_dict(json.loads(row[0])) if row else None

    # -- checkpoints ----------------------------------------------------------------
    def commit_checkpoint(self, row: CheckpointRow) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?)",
            (row.version, row.time_s, json.dumps(row.shards), json.dumps(row.files),
             json.dumps(row.placement), row.steps),
        )  # fmt: skip

    def latest_checkpoint(self) -> CheckpointRow | None:
        row = self.db.execute(
            "SELECT version, time_s, shards, files, placement, steps FROM checkpoints "
            "ORDER BY version DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        version, time_s, shards, files, placement, steps = row
        return CheckpointRow(
            version, time_s, json.loads(shards), json.loads(files), json.loads(placement), steps
        )

    def checkpoint_versions(self) -> list[int]:
        return [v for (v,) in self.db.execute("SELECT version FROM checkpoints ORDER BY version")]

    def forget_checkpoints(self, keep: set[int]) -> None:
        for version in self.checkpoint_versions():
            if version not in keep:
                self.db.execute("DELETE FROM checkpoints WHERE version = ?", (version,))

    # -- events and samples ---------------------------------------------------------------
    def record_event(self, time_s: float, node: str, kind: str, detail: str = "") -> None:
        self.db.execute(
            "INSERT INTO events (time_s, node, kind, detail) VALUES (?, ?, ?, ?)",
            (time_s, node, kind, detail),
        )

    def events(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT time_s, node, kind, detail FROM events ORDER BY seq")
        return [{"time_s": t, "node": n, "kind": k, "detail": d} for t, n, k, d in rows]

    def record_sample(self, time_s: float, data: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT INTO samples (time_s, data) VALUES (?, ?)", (time_s, json.dumps(data))
        )

    def samples(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT data FROM samples ORDER BY seq")
        return [json.loads(d) for (d,) in rows]

    # -- a script's sample ledger (runtime/sample_ledger.py) ------------------------------------
    def save_ledger(self, data: dict[str, Any]) -> None:
        """The ledger as it stands, written before the rank that changed it is answered."""
        self.db.execute("INSERT OR REPLACE INTO ledger (id, data) VALUES (1, ?)",
                        (json.dumps(data),))  # fmt: skip

    def ledger(self) -> dict[str, Any] | None:
        row = self.db.execute("SELECT data FROM ledger WHERE id = 1").fetchone()
        return json.loads(row[0]) if row else None


def read_job(path: Path) -> dict[str, Any] | None:
    """The job the state file at ``path`` holds; None if there is no file or no job in it."""
    return _read(path, StateStore.job)


def read_shape(path: Path) -> ClusterShape | None:
    """The last applied shape in the state file at ``path`` (None if none)."""
    return _read(path, StateStore.current_shape)


def _read(path: Path, what):
    if not path.exists():
        return None
    store = StateStore(path)
    try:
        return what(store)
    finally:
        store.close()
