"""The master's durable state in one SQLite file, so a restarted master resumes the job.

What is kept: the job (its spec, status, how many masters have run it), the
timeline of shapes (every change with its action, reason and measured
transition time — the current shape is the last row), committed checkpoints
(version, the shard queues they belong to, the files, the tensor placement),
node events (failures, OOM kills), metric samples, and a script job's sample
ledger (which of its checkpoint files hold which samples). A checkpoint row is
written in one transaction, so a version is either fully committed with its
shard snapshot or absent. Only the master writes (:class:`StateStore`); WAL mode
lets others read while it runs, through :class:`StateReader` (the service copying a
run into its store, the chaos harness watching a job): this module is the only one
that knows the file's tables.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rightsize.core.errors import SpecError
from rightsize.core.shape import ClusterShape
from rightsize.core.status import JobStatus, from_state_file

__all__ = ["CheckpointRow", "JobStatus", "LaunchRow", "StateReader", "StateStore",
           "StateUnreadable", "StoredEvent", "StoredSample", "read_job", "read_shape"]  # fmt: skip

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


@dataclass(frozen=True)
class StoredSample:
    """One metric sample as the state file numbers it (``seq`` never goes back)."""

    seq: int
    time_s: float
    status: dict[str, Any]  # the master's progress status at that sample


@dataclass(frozen=True)
class StoredEvent:
    """One node event (a failure, an OOM kill) as the state file numbers it."""

    seq: int
    time_s: float
    node: str
    kind: str
    detail: str


class StateUnreadable(Exception):
    """A :class:`StateReader` could not read the file: absent, being created, or locked past
    its patience. A reader that polls a running job tries again later."""


class _Reads:
    """The state file's queries: every read of its tables, for the writer and the readers."""

    db: sqlite3.Connection

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.db.execute(sql, params).fetchall()

    def close(self) -> None:
        self.db.close()

    # -- the job --------------------------------------------------------------------
    def job(self) -> dict[str, Any] | None:
        rows = self._rows(
            "SELECT name, spec, identity, status, started_at, finished_s, masters, generation, "
            "isolation FROM job WHERE id = 1"
        )
        if not rows:
            return None
        keys = ("name", "spec", "identity", "status", "started_at", "finished_s", "masters",
                "generation", "isolation")  # fmt: skip
        job = dict(zip(keys, rows[0], strict=True))
        job["spec"] = json.loads(job["spec"])
        job["status"] = from_state_file(job["status"])
        return job

    # -- the timeline ---------------------------------------------------------------
    def numbered_timeline(self) -> list[tuple[int, dict[str, Any]]]:
        """Every timeline row with its ``seq``, in order (see :meth:`timeline`)."""
        rows = self._rows(
            "SELECT seq, time_s, action, reason, shape, applied, transition_s, details, notes "
            "FROM timeline ORDER BY seq"
        )
        return [
            (seq, {"time_s": t, "action": a, "reason": r, "shape": json.loads(s),
                   "applied": bool(ok), "transition_s": tr, "details": json.loads(d),
                   "notes": json.loads(n)})
            for seq, t, a, r, s, ok, tr, d, n in rows
        ]  # fmt: skip

    def timeline(self) -> list[dict[str, Any]]:
        return [row for _, row in self.numbered_timeline()]

    def current_shape(self) -> ClusterShape | None:
        rows = self._rows("SELECT shape FROM timeline WHERE applied = 1 ORDER BY seq DESC LIMIT 1")
        return ClusterShape.from_dict(json.loads(rows[0][0])) if rows else None

    # -- checkpoints ----------------------------------------------------------------
    def latest_checkpoint(self) -> CheckpointRow | None:
        rows = self._rows(
            "SELECT version, time_s, shards, files, placement, steps FROM checkpoints "
            "ORDER BY version DESC LIMIT 1"
        )
        if not rows:
            return None
        version, time_s, shards, files, placement, steps = rows[0]
        return CheckpointRow(
            version, time_s, json.loads(shards), json.loads(files), json.loads(placement), steps
        )

    def checkpoint_versions(self) -> list[int]:
        return [v for (v,) in self._rows("SELECT version FROM checkpoints ORDER BY version")]

    # -- events and samples ---------------------------------------------------------------
    def events(self) -> list[dict[str, Any]]:
        return [{"time_s": e.time_s, "node": e.node, "kind": e.kind, "detail": e.detail}
                for e in self.events_after(0)]  # fmt: skip

    def events_after(self, seq: int) -> list[StoredEvent]:
        """The events numbered past ``seq`` (0: all of them), in order."""
        rows = self._rows("SELECT seq, time_s, node, kind, detail FROM events WHERE seq > ? "
                          "ORDER BY seq", (seq,))  # fmt: skip
        return [StoredEvent(*row) for row in rows]

    def samples(self) -> list[dict[str, Any]]:
        return [s.status for s in self.samples_after(0)]

    def samples_after(self, seq: int) -> list[StoredSample]:
        """The metric samples numbered past ``seq`` (0: all of them), in order."""
        rows = self._rows("SELECT seq, time_s, data FROM samples WHERE seq > ? ORDER BY seq",
                          (seq,))  # fmt: skip
        return [StoredSample(s, t, json.loads(d)) for s, t, d in rows]

    def last_sample(self) -> dict[str, Any] | None:
        """The latest metric sample's status (None before the first)."""
        rows = self._rows("SELECT data FROM samples ORDER BY seq DESC LIMIT 1")
        return json.loads(rows[0][0]) if rows else None

    # -- a script's sample ledger (runtime/sample_ledger.py) ------------------------------------
    def ledger(self) -> dict[str, Any] | None:
        rows = self._rows("SELECT data FROM ledger WHERE id = 1")
        return json.loads(rows[0][0]) if rows else None


class StateStore(_Reads):
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

    # -- the job --------------------------------------------------------------------
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

    # -- checkpoints ----------------------------------------------------------------
    def commit_checkpoint(self, row: CheckpointRow) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?)",
            (row.version, row.time_s, json.dumps(row.shards), json.dumps(row.files),
             json.dumps(row.placement), row.steps),
        )  # fmt: skip

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

    def record_sample(self, time_s: float, data: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT INTO samples (time_s, data) VALUES (?, ?)", (time_s, json.dumps(data))
        )

    # -- a script's sample ledger (runtime/sample_ledger.py) ------------------------------------
    def save_ledger(self, data: dict[str, Any]) -> None:
        """The ledger as it stands, written before the rank that changed it is answered."""
        self.db.execute("INSERT OR REPLACE INTO ledger (id, data) VALUES (1, ?)",
                        (json.dumps(data),))  # fmt: skip


class StateReader(_Reads):
    """Reads a state file another process (its master) may be writing, without writing to it.

    Every read raises :class:`StateUnreadable` when the file cannot be read (absent, being
    created, locked for longer than ``timeout_s``), so a caller that polls tries again.
    """

    def __init__(self, path: Path, timeout_s: float = 30.0) -> None:
        try:
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout_s)
        except sqlite3.Error as exc:
            raise StateUnreadable(f"{path}: {exc}") from None
        self.path = path

    def __enter__(self) -> StateReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return super()._rows(sql, params)
        except sqlite3.Error as exc:
            raise StateUnreadable(f"{self.path}: {exc}") from None


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
