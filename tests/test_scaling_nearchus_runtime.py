"""NEARCHUS driving a real job (issue 5, item 9): launched at R0, then scaled up by the same
policy class that drives the simulator.

The job is real — an MLP on the digits, its PS and workers separate processes with
their own CPU limits (``rightsize.runtime``). Three thresholds are set for a tiny job
on a shared 2-core machine, each named in the policy's parameters: stability over
3 points of 2 s (the paper's 5 of 60 s would take minutes), a CV below 30% (a loaded
machine is noisy), and ``E_thd_job`` 0.3 — processes that share two cores with other
work cannot use their whole quota, so a measured ``e_job`` stays near 0.5 whatever
the shape. The rule under test is unchanged: ``e_job ≥ E_thd_job`` scales every node
up by ``R_up`` (50%), in proportion, within the budget.
"""

from pathlib import Path

import pytest

from rightsize.runtime.master import Master
from rightsize.scaling.api import Action
from rightsize.scaling.nearchus import NearchusPolicy
from test_runtime_jobs import job_spec

pytestmark = pytest.mark.integration


def nearchus_job(tmp_path: Path):
    """MLP-3 (hidden 256) on the digits, launched by the policy ("auto") on a 2-cpu budget."""
    return job_spec(
        tmp_path, name="nearchus-real", options={"hidden": 256}, batch_size=256, epochs=150,
        budget={"cpu": 2, "memory": "6Gi"}, initial_shape="auto",
        checkpoint={"dir": str(tmp_path / "ckpt"), "interval": "30s"},
    )  # fmt: skip


class Watching(NearchusPolicy):
    """NEARCHUS, remembering the plans it has seen applied (to end the job once it scaled)."""

    def decide(self, observation):
        self.applied = [p.action for p in observation.plans]
        return super().decide(observation)


def test_a_real_job_starts_at_r0_and_nearchus_scales_it_up(tmp_path):
    policy = Watching(
        r0=0.5, stability_period_s=2.0, n_comp=3, cv_max=0.3, e_thd_job=0.3, min_step_cores=0.05
    )
    policy.applied = []
    master = Master(nearchus_job(tmp_path), policy)
    finished = master.finished
    master.finished = lambda: finished() or Action.SCALE_UP in policy.applied
    report = master.run()

    applied = [t for t in report["timeline"] if t["applied"]]
    cpu = [sum(n["cpu"] for n in t["shape"]["nodes"]) for t in applied]
    # launch: R0 = 50% of 2 cpu as (1 PS, 2 workers), a third and two thirds
    assert applied[0]["action"] == "launch"
    assert cpu[0] == pytest.approx(1.0, abs=0.01) and len(applied[0]["shape"]["nodes"]) == 3
    ups = [i for i, t in enumerate(applied) if t["action"] == "scale_up"]
    assert ups, [t["reason"] for t in applied]
    before, after = applied[ups[0] - 1]["shape"]["nodes"], applied[ups[0]]["shape"]["nodes"]
    # +50% of what the job held, spread in proportion over the nodes, within the budget
    assert cpu[ups[0]] == pytest.approx(min(1.5 * cpu[ups[0] - 1], 2.0), abs=0.01)
    grown = {n["name"]: n["cpu"] for n in after}
    for node in before:
        assert grown[node["name"]] == pytest.approx(node["cpu"] * cpu[ups[0]] / cpu[ups[0] - 1],
                                                    abs=0.002)  # fmt: skip
    assert "e_job" in applied[ups[0]]["reason"]
