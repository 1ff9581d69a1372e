"""The store: migrations, tokens, jobs, and copying a run's state file into it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import parse_job_spec
from rightsize.runtime.state import LaunchRow, StateStore
from rightsize.service.db import as_url
from rightsize.service.ingest import time_to_near_best
from rightsize.service.models import Base, JobPhase, Source
from rightsize.service.store import Store
from service_helpers import database_urls

GI = 2**30


def spec(name="job", **fields):
    data = {"name": name, "workload": "mlp3", "dataset": "digits", "batch_size": 64,
            "budget": {"cpu": 1, "memory": "2Gi"}, **fields}  # fmt: skip
    return parse_job_spec(data)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    urls = database_urls(tmp_path)
    if request.param not in urls:
        pytest.skip("no PostgreSQL here (CI provides one)")
    store = Store(urls[request.param])
    yield store
    store.close()


def test_migrations_make_exactly_the_models_schema(store):
    with store.engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []


def test_opening_twice_migrates_once_and_keeps_rows(tmp_path):
    path = tmp_path / "s.db"
    first = Store(str(path))
    first.create_token("alice")
    first.close()
    again = Store(str(path))
    assert again.count_jobs() == 0
    with pytest.raises(SpecError, match="already has a token"):
        again.create_token("alice")


def test_a_token_is_stored_only_as_its_hash(tmp_path):
    path = tmp_path / "s.db"
    store = Store(str(path))
    token = store.create_token("alice")
    other = store.create_token("bob")
    assert store.owner(token) != store.owner(other)
    assert store.owner(token + "x") is None
    store.close()
    assert token.encode() not in path.read_bytes()
    rows = sqlite3.connect(path).execute("SELECT digest FROM tokens").fetchall()
    assert all(len(r[0]) == 64 for r in rows)


def test_bad_database_urls_fail_in_one_line():
    with pytest.raises(SpecError, match="--database"):
        Store("nosuchdriver://x/y")
    assert as_url("postgresql://u@h/db").startswith("postgresql+psycopg://")


def test_job_names_are_made_unique(store, tmp_path):
    first = store.add_job(spec(), owner_id=None, source=Source.RUN, phase=JobPhase.WAITING,
                          state_path=tmp_path / "a", policy="static")  # fmt: skip
    second = store.add_job(spec(), owner_id=None, source=Source.RUN, phase=JobPhase.WAITING,
                           state_path=tmp_path / "b", policy="static")  # fmt: skip
    assert (first.name, second.name) == ("job", "job-2")
    assert [j.name for j in store.jobs(phases=(JobPhase.WAITING,))] == ["job", "job-2"]


def _status(step: int, speed: float) -> dict:
    node = {"name": "worker-0", "role": "worker", "cpu_used": 0.4, "cpu_allocated": 0.5,
            "memory_used": 3 * GI, "memory_allocated": 4 * GI, "net_in": 1e6, "net_out": 2e6,
            "steps_per_s": speed}  # fmt: skip
    return {"time_s": float(step), "epoch": 0, "steps_done": step * 10, "steps_total": 100,
            "steps_per_s": speed, "samples_per_s": speed * 64, "loss": 1.0 / (step + 1),
            "e_job": 0.9, "shape": "1x0.5", "nodes": [node]}  # fmt: skip


def test_ingest_copies_only_what_is_new_and_refreshes_the_timeline(store, tmp_path):
    state_path = tmp_path / "job.sqlite"
    state = StateStore(state_path)
    shape = ClusterShape.from_counts(1, 1, Resources(0.5, GI), Resources(0.5, GI))
    seq = state.start_job("job", {}, "id", 100.0, LaunchRow(shape, "launch", "first", {}))
    for step in range(1, 4):
        state.record_sample(float(step), _status(step, 1.0))
    job = store.add_job(spec(), owner_id=None, source=Source.RUN, phase=JobPhase.RUNNING,
                        state_path=state_path, policy="static")  # fmt: skip
    store.ingest(job.id, state_path)
    assert [s.seq for s in store.samples(job.id)] == [1, 2, 3]
    assert store.shapes(job.id)[0].transition_s is None
    # the launch row's transition is filled in later; more samples come
    state.set_transition(seq, 4.5, {"nodes": 2}, "first, launched")
    for step in range(4, 7):
        state.record_sample(float(step), _status(step, 2.0))
    state.record_event(5.0, "worker-0", "oom_killed", "memory")
    store.ingest(job.id, state_path)
    samples = store.samples(job.id)
    assert [s.seq for s in samples] == [1, 2, 3, 4, 5, 6]  # no sample twice
    assert samples[-1].nodes[0].memory_used == 3 * GI  # > 2^31: a BigInteger on PostgreSQL
    shapes = store.shapes(job.id)
    assert len(shapes) == 1 and shapes[0].transition_s == 4.5
    assert shapes[0].reason == "first, launched"
    store.finish(job.id, JobPhase.FINISHED, {"wall_time_s": 6.0, "accounting": {"checked": True}})
    done = store.job_by_id(job.id)
    assert done.phase == "finished" and done.measured_time_s == 6.0
    assert done.measured_core_h == pytest.approx(0.5 * 6 / 3600)  # 0.5 core for 6 s
    assert done.best_samples_per_s == pytest.approx(128.0)
    assert done.time_to_95_s == 5.0  # the running median of 3 reaches 128 at the 5th sample
    state.close()


def test_time_to_near_best_ignores_a_single_spike():
    speeds = [10, 10, 100, 10, 50, 50, 50]
    best, reached = time_to_near_best(speeds, list(range(len(speeds))))
    assert best == 50 and reached == 4  # medians 10, 10, 50, 50, 50: not 100


def test_a_store_from_before_host_studies_keeps_its_studies(tmp_path):
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine, text

    import rightsize.service.db as db

    url = as_url(str(tmp_path / "old.db"))
    engine = create_engine(url)
    config = Config()
    config.set_main_option("script_location", str(Path(db.__file__).parent / "migrations"))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0004")  # studies had to have an owner then
        connection.execute(text("INSERT INTO tokens (id, name, digest, created_at) "
                                "VALUES (1, 'alice', 'x', 0)"))  # fmt: skip
        connection.execute(text("INSERT INTO studies (owner_id, name, workload, dataset, "
                                "created_at, report) VALUES (1, 'old', 'mlp3', 'digits', 0, "
                                "'{\"best\": {\"val_loss\": 0.5}}')"))  # fmt: skip
    engine.dispose()
    store = Store(url)  # migrates to the newest revision
    assert [(s.name, s.host, s.best) for s in store.studies(1)] == [
        ("old", False, {"val_loss": 0.5})]  # fmt: skip
    store.add_study(None, "the-hosts", {"workload": "mlp3", "dataset": "digits"})
    assert [s.host for s in store.studies(1)] == [False, True]
    with store.engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []
    store.close()
