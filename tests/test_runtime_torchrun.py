"""`rightsize torchrun` on real scripts in real processes: torchrun's environment, measured
without touching the script, restarts by torchrun's contract, resizes in place and by restart,
signals, and scripts that fail at once. The scripts are the project's own, written in the
styles public ones use (examples/torchrun/train_ddp.py: DDP + DistributedSampler + a snapshot;
tests/scripts/accum_schedule.py: gradient accumulation and an LR schedule; no_save.py: saves
nothing); the exactly-once counter script runs under the chaos harness
(tests/test_runtime_chaos.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rightsize.runtime.chaos import node_processes

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parent.parent
DDP_SCRIPT = ROOT / "examples" / "torchrun" / "train_ddp.py"
SCRIPTS = ROOT / "tests" / "scripts"
BIN = Path(sys.executable).parent


def torchrun(tmp_path: Path, *argv: str, timeout_s: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "rightsize"), "torchrun", "--quiet", *map(str, argv)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=timeout_s)  # fmt: skip


def start(tmp_path: Path, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "rightsize"), "torchrun", "--quiet", *map(str, argv)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def report(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "checkpoints" / f"{name}-report.json").read_text())


def wait_for(predicate, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def killed_once_saved(run: subprocess.Popen, saved: Path) -> str:
    """SIGKILL rank 1 once the script has saved ``saved``; the run's stderr when it ends."""
    try:
        wait_for(saved.exists)
        os.kill(node_processes(run.pid)["worker-1"], signal.SIGKILL)
        return run.communicate(timeout=240)[1]
    finally:
        run.kill()


def log_of(tmp_path: Path, name: str, node: str) -> str:
    return (tmp_path / "checkpoints" / name / "logs" / f"{node}.log").read_text()


def test_the_ranks_see_what_torchrun_sets(tmp_path):
    """The same script under plain torchrun and under rightsize torchrun: the same variables."""
    script = SCRIPTS / "dump_env.py"
    subprocess.run([str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", str(script),
                    "plain"], cwd=tmp_path, check=True, capture_output=True, timeout=120)  # fmt: skip
    done = torchrun(tmp_path, "--nproc-per-node", "2", script, "ours")
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        plain = json.loads((tmp_path / f"plain.{rank}.json").read_text())
        ours = json.loads((tmp_path / f"ours.{rank}.json").read_text())
        assert set(ours) >= set(plain), set(plain) - set(ours)
        for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                    "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT",
                    "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS"):  # fmt: skip
            assert ours[key] == plain[key], key


def test_the_ranks_share_their_quotas_sum_unless_told_not_to(tmp_path):
    """Two ranks of 0.5 CPU: pooled (the default), the job's directory holds 1 core and each
    rank may run up to all of it; with --no-cpu-pool each is held to its own half. (The
    budget is what the ranks plan, so that none launches with a start-up allowance.)"""
    script = SCRIPTS / "own_quota.py"
    for name, extra, expected in (("pooled", [], {"rank": 1.0, "job": 1.0}),
                                  ("own", ["--no-cpu-pool"], {"rank": 0.5, "job": None})):  # fmt: skip
        done = torchrun(tmp_path, "--nproc-per-node", "2", "--cpu-per-proc", "0.5",
                        "--budget-cpu", "1", *extra, "--fresh", script, name)  # fmt: skip
        assert done.returncode == 0, done.stderr
        if "cgroup" not in report(tmp_path, "own_quota")["isolation"]:
            pytest.skip("no cgroups here")
        for rank in (0, 1):
            assert json.loads((tmp_path / f"{name}.{rank}.json").read_text()) == expected


def test_a_ddp_script_is_measured_and_survives_a_killed_rank_from_its_snapshot(tmp_path):
    run = start(tmp_path, "--nproc-per-node", "2", "--max-restarts", "2", DDP_SCRIPT,
                "--epochs", "10", "--samples", "16384")  # fmt: skip
    err = killed_once_saved(run, tmp_path / "snapshot.pt")
    assert run.returncode == 0, err
    rep = report(tmp_path, "train_ddp")
    assert rep["script"]["failed_restarts"] == 1 and len(rep["script"]["groups"]) == 2
    restart = next(t for t in rep["timeline"] if t["action"] == "restart_group")
    assert "worker-1 died" in restart["reason"] and restart["details"]["restart_s"] > 0
    assert "Resuming training from snapshot" in log_of(tmp_path, "train_ddp", "worker-0")
    # measured by the hooks and the cgroups, the script untouched
    steady = [s for s in rep["throughput"] if s["samples_per_s"] > 0]
    assert steady and rep["steps"] > 0 and rep["samples"] >= 64 * rep["steps"]
    assert all(n["cpu_used_mean"] > 0 and n["memory_peak"] > 0 for n in rep["nodes"].values())
    assert any(s["loss"] is not None for s in rep["throughput"])
    assert rep["restarts"]["events"][0]["detail"] == "killed by SIGKILL"


def test_a_rank_with_dataloader_workers_is_killed_whole_and_restarted(tmp_path):
    """A rank's DataLoader worker processes live in its cgroup; when the rank is killed they
    go with it (a cgroup with a process inside cannot be removed), and the group restarts."""
    run = start(tmp_path, "--nproc-per-node", "2", "--max-restarts", "1", SCRIPTS / "slow_data.py",
                "--epochs", "6", "--workers", "2")  # fmt: skip
    err = killed_once_saved(run, tmp_path / "slow.pt")
    assert run.returncode == 0, err
    assert report(tmp_path, "slow_data")["script"]["failed_restarts"] == 1


def test_the_launcher_counts_optimizer_steps_and_samples_as_the_script_does(tmp_path):
    """Gradient accumulation: 4 batches a step; the script counts its own."""
    done = torchrun(tmp_path, "--nproc-per-node", "2", SCRIPTS / "accum_schedule.py",
                    "--max-steps", "40", "--accumulation", "4")  # fmt: skip
    assert done.returncode == 0, done.stderr
    own = json.loads((tmp_path / "accum-counts.json").read_text())
    rep = report(tmp_path, "accum_schedule")
    assert rep["steps"] == own["optimizer_steps"] == 40
    assert rep["samples"] == 2 * own["samples"]  # both ranks' samples; rank 0 counted its own
    assert "the script's own sampler" in rep["accounting"]["data"]


def test_a_script_that_fails_at_once_is_one_line_and_exit_2(tmp_path):
    done = torchrun(tmp_path, "--nproc-per-node", "2", "--max-restarts", "3",
                    SCRIPTS / "fails_at_start.py")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "before its first step: ModuleNotFoundError" in done.stderr
    assert "a_module_that_is_not_installed" in done.stderr


def test_a_rank_that_aborts_after_the_script_finished_on_another_is_not_restarted(tmp_path):
    done = torchrun(tmp_path, "--nproc-per-node", "2", "--max-restarts", "2",
                    SCRIPTS / "abort_at_exit.py")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rep = report(tmp_path, "abort_at_exit")
    assert rep["script"]["ended_after_the_script"] == {"worker-1": "killed by SIGABRT"}
    assert rep["script"]["failed_restarts"] == 0 and len(rep["script"]["groups"]) == 1


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_reaches_every_rank_and_ends_with_one_line(tmp_path, sig, code):
    run = start(tmp_path, "--nproc-per-node", "2", SCRIPTS / "no_save.py", "--steps", "100000")
    try:
        wait_for(lambda: len(node_processes(run.pid)) == 2)
        ranks = node_processes(run.pid)
        time.sleep(3)
        run.send_signal(sig)
        _, err = run.communicate(timeout=60)
    finally:
        run.kill()
    assert run.returncode == code, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"every rank was sent {signal.Signals(sig).name}" in err
    assert not any(Path(f"/proc/{pid}").exists() for pid in ranks.values())


def test_a_rank_held_back_by_its_quota_grows_in_place_without_a_restart(tmp_path):
    """1 rank at 0.5 cpu of a 2-cpu budget: goodput grows it in place; the script, which saves
    nothing, is never restarted (a restart would start it over)."""
    done = torchrun(tmp_path, "--nproc-per-node", "1", "--cpu-per-proc", "0.5", "--budget-cpu",
                    "2", "--policy", "goodput", SCRIPTS / "no_save.py", "--steps", "15000")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rep = report(tmp_path, "no_save")
    grown = [m for m in rep["moves"] if m["taken"] and m["action"] == "scale_up"]
    assert grown and "in place" in grown[0]["reason"]
    assert len(rep["script"]["groups"]) == 1  # one start: nothing restarted
    assert rep["final_shape"]["nodes"][0]["cpu"] > 0.5
    assert grown[0]["samples_per_s_after"] > grown[0]["samples_per_s_before"]


def test_a_waiting_rank_is_joined_by_more_ranks_when_the_restart_pays(tmp_path):
    """Ranks that wait for their data (each sample takes a millisecond to read) use little of
    their cpu: eq. 10 asks for more ranks, the restart pays against the job's time so far,
    the master waits for the script's next snapshot, and the group restarts at the new world
    size from it: the epochs left take half the time."""
    done = torchrun(tmp_path, "--nproc-per-node", "1", "--cpu-per-proc", "1", "--budget-cpu",
                    "2", "--max-nproc", "2", "--policy", "goodput", SCRIPTS / "slow_data.py",
                    "--epochs", "14")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rep = report(tmp_path, "slow_data")
    move = next(m for m in rep["moves"] if m["action"] == "add_worker")
    assert move["taken"] and "pays back" in move["reason"], rep["moves"]
    assert move["restart_s"] > 0 and len(rep["script"]["groups"]) == 2
    assert move["lost_s"] < 1.0  # stopped right after the script's snapshot
    assert move["samples_per_s_after"] > 1.5 * move["samples_per_s_before"]
    assert [n["name"] for n in rep["final_shape"]["nodes"]] == ["worker-0", "worker-1"]


def test_a_restart_with_nothing_left_to_pay_it_back_is_declined_and_reported(tmp_path):
    """The same waiting rank, but the job says it is one optimizer step long (``--steps 1``):
    whatever eq. 10 asks for has no work left to win back the measured restart, so the group
    is never restarted, and the report's moves say why."""
    done = torchrun(tmp_path, "--nproc-per-node", "1", "--cpu-per-proc", "1", "--budget-cpu",
                    "2", "--max-nproc", "2", "--policy", "goodput", "--steps", "1",
                    SCRIPTS / "slow_data.py", "--epochs", "14")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rep = report(tmp_path, "slow_data")
    asked = [m for m in rep["moves"] if m["action"] == "add_worker"]
    assert asked and not any(m["taken"] for m in asked), rep["moves"]
    assert "not taken" in asked[0]["reason"] and "restart" in asked[0]["reason"], asked[0]
    assert len(rep["script"]["groups"]) == 1
    assert [n["name"] for n in rep["final_shape"]["nodes"]] == ["worker-0"]


def test_without_nproc_a_script_starts_from_the_shape_its_last_run_measured(tmp_path):
    """Issue 37 item 8 from the command line: a run of 2 ranks of 0.5 cpu is stored; the same
    script and arguments again, without --nproc-per-node, launches that shape from history
    instead of one rank."""
    store = ["--database", tmp_path / "store.db", "--budget-cpu", "2"]
    args = [DDP_SCRIPT, "--epochs", "10", "--samples", "8192"]  # sampled past the settling
    first = torchrun(tmp_path, *store, "--name", "first", "--nproc-per-node", "2",
                     "--cpu-per-proc", "0.5", *args)  # fmt: skip
    assert first.returncode == 0, first.stderr
    os.remove(tmp_path / "snapshot.pt")  # the second run trains from the start
    again = torchrun(tmp_path, *store, "--name", "again", *args)
    assert again.returncode == 0, again.stderr
    launch = report(tmp_path, "again")["timeline"][0]
    assert launch["reason"].startswith("history: first ran"), launch
    assert [n["cpu"] for n in launch["shape"]["nodes"]] == [0.5, 0.5]


def test_a_job_file_with_a_script_runs_through_rightsize_run(tmp_path):
    (tmp_path / "job.yaml").write_text(
        f"name: from-file\nscript: {DDP_SCRIPT}\nargs: [--epochs, '2']\n"
        "budget: {cpu: 2, memory: 4Gi}\n"
        "initial_shape: {workers: {count: 2, cpu: 1, memory: 1Gi}}\n"
    )  # fmt: skip
    done = subprocess.run([str(BIN / "rightsize"), "run", "job.yaml", "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "script " in done.stdout and "optimizer steps" in done.stdout
    assert report(tmp_path, "from-file")["steps"] == 2 * 8192 // 128
