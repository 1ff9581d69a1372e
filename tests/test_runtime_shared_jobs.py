"""Real jobs with the shared-memory data plane on and off (runtime.shared_memory).

The counting workload (rightsize.workloads.counter) is trained with tensors through
shared memory and through sockets: both must apply every sample exactly once per epoch
— read from the trained weights, not the runtime's logs — and account for it alike;
the workers' logs say which carrier ran. Segments never outlive their job: not after a
clean end, not after a worker is SIGKILLed (the master removes them when it reaps the
process), not after the master itself is killed (the rerun's master sweeps them).
"""

import json
from pathlib import Path

import pytest

from rightsize.runtime.chaos import (
    Anchor,
    Schedule,
    Strike,
    Target,
    Verdict,
    counter_job,
    run_schedule,
    trained_counts,
)
from rightsize.runtime.master import Master
from rightsize.runtime.sharedmem import SHM_DIR
from rightsize.scaling.registry import make_policy

pytestmark = pytest.mark.integration


def segments_of(job: str) -> list[str]:
    """Shared-memory segments of job ``job``'s nodes (``rightsize.<pid>.<token>.<job>.…``)."""
    return sorted(p.name for p in SHM_DIR.glob("rightsize.*") if p.name.split(".")[3] == job)


def carriers(spec) -> set[str]:
    """What the workers' logs say carried their tensors."""
    lines = []
    for log in (spec.checkpoint.dir / spec.name / "logs").glob("worker-*.log"):
        lines += [line for line in log.read_text().splitlines() if "tensors ps-" in line]
    return {part.split(" by ")[1] for line in lines for part in line.split(": tensors ")[1].split(", ")}


def test_shared_memory_and_sockets_train_every_sample_exactly_once_alike(tmp_path):
    epochs, accounts = 6, {}
    for mode in ("auto", "off"):
        _, spec = counter_job(tmp_path / mode, epochs=epochs, samples=1024, shared_memory=mode)
        report = Master(spec, make_policy("static"), fresh=True, warn=lambda _: None).run()
        assert report["accounting"]["exactly_once"] is True
        counts = trained_counts(spec)
        assert counts and all(bool((c == epochs).all()) for c in counts.values())
        assert carriers(spec) == {"shared memory" if mode == "auto" else "sockets"}
        assert segments_of(spec.name) == []
        # the checkpoint count follows wall time (a slower, loaded run takes one more), not
        # the carrier: every other entry of the accounting must agree
        accounts[mode] = {k: v for k, v in report["accounting"].items() if k != "checkpoint"}
    assert accounts["auto"] == accounts["off"]


@pytest.mark.parametrize(
    "target", [Target.WORKER, Target.MASTER], ids=["worker-killed", "master-killed"]
)
def test_a_killed_process_leaves_no_shared_memory_behind(tmp_path, target):
    job, spec = counter_job(tmp_path, epochs=40)
    schedule = Schedule(-20, (Strike(1.5, target, 0),), Anchor.TRAINING)
    outcome = run_schedule(job, spec, schedule, timeout_s=300)
    assert outcome.verdict == Verdict.EXACTLY_ONCE, outcome.explain()
    assert outcome.landed[0].pid is not None  # the kill hit a process
    assert carriers(spec) == {"shared memory"}
    assert segments_of(spec.name) == []  # the killed nodes' too: removed on reaping, or swept
    report = json.loads(Path(spec.checkpoint.dir / "chaos-report.json").read_text())
    assert report["accounting"]["exactly_once"] is True
