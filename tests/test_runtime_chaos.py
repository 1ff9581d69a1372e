"""Chaos: kills and freezes of workers, servers and the master, judged by the trained weights.

The job trains the counting workload (rightsize.workloads.counter): minus each trained
weight is how often its sample was applied, so the check reads the parameters, not the
runtime's own logs. A schedule passes when the job ends with exit 0 and every sample
was applied exactly ``epochs`` times in every tensor, or fails loudly (non-zero exit,
one ``error:`` line). The named schedules are the failures issue 16 found; the seeded
ones run with ``--chaos-schedules N`` (CI runs as many as fit its budget; the chaos
benchmark runs 30+: benchmarks/runtime_chaos.py).
"""

import pytest

from rightsize.runtime.chaos import (
    Fault,
    Schedule,
    Strike,
    Target,
    Verdict,
    counter_job,
    random_schedule,
    run_schedule,
)

pytestmark = pytest.mark.integration
EPOCHS = 40  # about 10 s of training here: the strikes below land inside it

NAMED = {
    # a worker, then a server 0.8 s later, while the first recovery runs: 53-100% of the
    # sample-epochs were lost with exit 0 before (a worker registered during the restore
    # trained against no server)
    "worker-then-ps": (Schedule(-1, (Strike(2.0, Target.WORKER, 0), Strike(0.8, Target.PS, 1)),
                                after_training=True),
                       ["restore_ps", '"worker-0": 1', '"ps-1": 1']),
    # the master during launch, after the job row is written: every rerun crashed before
    "master-in-launch": (Schedule(-2, (Strike(3.0, Target.MASTER),)), ["resume"]),
    # a worker stopped for 30 s: never noticed before (the epoch waited for its lease);
    # now the liveness timeout (10 s here) kills and replaces it
    "frozen-worker": (Schedule(-3, (Strike(2.0, Target.WORKER, 1, Fault.FREEZE, 30.0),),
                               after_training=True),
                      ["unresponsive for", "relaunch_worker"]),
}  # fmt: skip


def check(outcome) -> None:
    assert outcome.verdict.passed, outcome.to_dict()


@pytest.mark.parametrize("name", sorted(NAMED))
def test_named_schedule_ends_exactly_once(tmp_path, name):
    schedule, in_report = NAMED[name]
    job, spec = counter_job(tmp_path, epochs=EPOCHS)
    outcome = run_schedule(job, spec, schedule, timeout_s=300)
    check(outcome)
    assert outcome.verdict == Verdict.EXACTLY_ONCE  # these recover; failing loudly is not enough
    assert all(s["min"] == s["max"] == EPOCHS for s in outcome.counts.values())
    assert outcome.report_exactly_once is True  # the runtime's own check agrees with the weights
    report = (spec.checkpoint.dir / "chaos-report.json").read_text()
    assert all(text in report for text in in_report), in_report


@pytest.mark.chaos
def test_seeded_schedule(tmp_path, chaos_seed):
    job, spec = counter_job(tmp_path, epochs=EPOCHS)
    check(run_schedule(job, spec, random_schedule(chaos_seed), timeout_s=400))
