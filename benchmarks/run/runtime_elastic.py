"""Transition time of each elastic operation on a running PS job (DLRover §5.3, §4.2).

A scripted policy drives one Wide&Deep job through every operation the runtime
offers, in a cycle: resize a worker in place (up, then back down), add a worker,
remove it, add a PS, remove it, replace the PS by a new one; each cycle
repeated ``--cycles`` times. Then faults (``--faults``, issue 16): SIGKILL a
worker, SIGKILL a parameter server, and SIGSTOP a worker for 30 s; for each, the
time from the fault to the runtime noticing it (its event) and to the job running
its whole shape again (the recovery's timeline row). The runtime measures each operation itself (from
the plan's arrival to the new shape running: the timeline's ``transition_s``)
and its parts (``details``: e.g. ``halt_s``, ``export_s``, ``paused_s`` — how long
workers stood still — and ``first_step_s`` of an added worker). An OOM relaunch
is produced on purpose at launch: one worker starts with too little memory, is
OOM-killed, and is relaunched with double the memory until it fits.

The JSON gives every transition and, per action, the median. Usage:

    python benchmarks/run/runtime_elastic.py --out benchmarks/results/runtime_elastic.json
    python benchmarks/run/runtime_elastic.py --quick   # one cycle, to check it works

``--source DIR`` runs the job with another checkout's ``src`` first on ``sys.path``
and PYTHONPATH (the code before a change, measured side by side).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

if "--source" in sys.argv:  # before rightsize is imported: measure another checkout's code
    _SOURCE = str(Path(sys.argv[sys.argv.index("--source") + 1]) / "src")
    sys.path.insert(0, _SOURCE)
    os.environ["PYTHONPATH"] = _SOURCE

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.job import job_spec
from benchmarks.lib.load import load_note
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole
from rightsize.runtime.chaos import node_processes
from rightsize.runtime.master import Master
from rightsize.scaling.api import Action, Observation, Plan, Policy
from rightsize.scaling.shapes import oom_killed_memory_doubled

MI, GI = 2**20, 2**30
#: Reasons of the scripted plans start with this, followed by the operation's label.
LABEL = "benchmark: "
#: Memory a worker cannot start torch in, so that it is OOM-killed (DLRover §4.2's case).
STARVED_MEMORY = 96 * MI
#: Seconds a frozen worker stays stopped (SIGSTOP) before it is continued.
FREEZE_S = 30.0
#: Seconds after a fault before the next step: recovery must be over.
FAULT_SETTLE_S = 40.0
Change = Callable[[ClusterShape], ClusterShape]


def faults() -> list[tuple[str, None, Callable[[ClusterShape], None]]]:
    """Kill a worker, kill a parameter server, freeze a worker (the runtime's processes)."""

    def hit(role: NodeRole, sig: int) -> Callable[[ClusterShape], None]:
        def strike(shape: ClusterShape) -> None:
            name = (shape.workers if role == NodeRole.WORKER else shape.ps)[-1].name
            pid = node_processes(os.getpid())[name]
            os.kill(pid, sig)
            if sig == signal.SIGSTOP:
                threading.Timer(FREEZE_S, _continue, (pid,)).start()

        return strike

    return [("kill_worker", None, hit(NodeRole.WORKER, signal.SIGKILL)),
            ("kill_ps", None, hit(NodeRole.PS, signal.SIGKILL)),
            ("freeze_worker", None, hit(NodeRole.WORKER, signal.SIGSTOP))]  # fmt: skip


def _continue(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:  # replaced meanwhile
        pass


def cycle() -> list[tuple[str, Action, Change]]:
    """Every operation once, returning to the starting shape (1 PS + 2 workers)."""
    worker = Resources(0.5, GI)

    def resize(cpu: float) -> Change:
        return lambda s: s.with_resources(s.workers[0].name, Resources(cpu, GI))

    def replace_ps(s: ClusterShape) -> ClusterShape:
        # by a server of the same size, so that every cycle's shapes fit a budget of this
        # machine's 2 CPUs (a larger one each cycle pushed the second cycle over it)
        old = s.ps[0]
        return s.with_node_added(NodeRole.PS, old.resources).without_node(old.name)

    return [
        ("resize_up", Action.SCALE_UP, resize(1.0)),
        ("resize_down", Action.RESHAPE, resize(0.5)),
        ("add_worker", Action.ADD_WORKER, lambda s: s.with_node_added(NodeRole.WORKER, worker)),
        ("remove_worker", Action.REMOVE_WORKER, lambda s: s.without_node(s.workers[-1].name)),
        ("add_ps", Action.ADD_PS, lambda s: s.with_node_added(NodeRole.PS, Resources(0.5, GI))),
        ("remove_ps", Action.RESHAPE, lambda s: s.without_node(s.ps[-1].name)),
        ("replace_ps", Action.REPLACE_PS, replace_ps),
    ]


class Cycler(Policy):
    """One scripted operation per decision, ``settle_s`` after the last change (a fault:
    ``FAULT_SETTLE_S``); on an OOM kill, double the killed node's memory first. A step whose
    action is None is a fault done to the job's processes, remembered with its time. The
    job ends once the script is done."""

    name = "bench-cycler"

    def __init__(self, steps: list, settle_s: float) -> None:
        self.steps, self.settle_s = list(steps), settle_s
        self.faults: list[tuple[str, float]] = []

    def initial_shape(self, budget, free):
        return None

    def decide(self, obs: Observation) -> Plan | None:
        relaunch = oom_killed_memory_doubled(obs)
        if relaunch is not None:
            return relaunch
        last_fault = self.faults[-1][1] if self.faults else float("-inf")
        if not self.steps or obs.time_s - obs.shape_since_s < self.settle_s or (
            obs.time_s - last_fault < FAULT_SETTLE_S
        ):
            return None
        label, action, change = self.steps.pop(0)
        if action is None:
            change(obs.shape)
            self.faults.append((label, obs.time_s))
            return None
        return Plan(change(obs.shape), action, f"{LABEL}{label}")


def run(cycles: int, settle_s: float, directory: Path, with_faults: bool) -> dict:
    spec = job_spec(
        directory, name="bench-elastic", epochs=10_000, steps=None,
        budget={"cpu": os.cpu_count() or 1, "memory": "16Gi"},
        initial_shape={"ps": {"count": 1, "cpu": 0.5, "memory": "1Gi"},
                       "workers": {"count": 2, "cpu": 0.5, "memory": "1Gi"}},
        runtime={"metric_interval": "1s", "max_restarts": 8},
    )  # fmt: skip
    policy = Cycler(cycle() * cycles + (faults() if with_faults else []), settle_s)
    warnings: list[str] = []
    report = ElasticBench(spec, policy, fresh=True, warn=warnings.append).run()
    return {"report": report, "warnings": warnings, "faults": policy.faults}


def fault_recoveries(report: dict, done: list[tuple[str, float]]) -> list[dict]:
    """For each fault: when the runtime noticed it (its event) and when the job ran its
    whole shape again (the first recovery row after it), in seconds after the fault."""
    rows = []
    for label, at_s in done:
        events = [e for e in report["restarts"]["events"] if e["time_s"] >= at_s]
        recovered = [t for t in report["timeline"] if t["time_s"] >= at_s and t["applied"]
                     and t["action"] in ("relaunch_worker", "restore_ps")]  # fmt: skip
        rows.append({
            "fault": label, "at_s": round(at_s, 2),
            "noticed_s": round(events[0]["time_s"] - at_s, 2) if events else None,
            "event": events[0]["detail"] if events else None,
            "recovered_s": round(recovered[0]["time_s"] - at_s, 2) if recovered else None,
            "recovery": recovered[0]["action"] if recovered else None,
            "transition_s": recovered[0]["transition_s"] if recovered else None,
        })  # fmt: skip
    return rows


class ElasticBench(Master):
    """The master, with worker-1 starved of memory at launch (the OOM case, without touching
    the job file) and the job ended once the script has run and the last change settled."""

    def _launch_plan(self) -> Plan:
        plan = super()._launch_plan()
        small = Resources(0.5, STARVED_MEMORY)
        return Plan(plan.shape.with_resources("worker-1", small), plan.action, plan.reason)

    def finished(self) -> bool:
        return super().finished() or (not self.policy.steps and _settled(self))


def _settled(master) -> bool:
    """The last change has run for a few seconds (so its effect is in the samples), and the
    last fault has had the time to be noticed and recovered from."""
    rows = master.store.timeline()
    faults = master.policy.faults
    if faults and master.time_s() - faults[-1][1] < FAULT_SETTLE_S:
        return False
    return bool(rows) and master.time_s() - rows[-1]["time_s"] > 3


def transitions(report: dict) -> list[dict]:
    """Applied changes with their measured time, labelled by operation (from the reason)."""
    rows = []
    for t in report["timeline"]:
        if not t["applied"] or t["transition_s"] is None:
            continue
        reason = t["reason"]
        label = reason[len(LABEL) :] if reason.startswith(LABEL) else t["action"]
        rows.append({"operation": label, **t})
    return rows


def summarize(rows: list[dict]) -> dict:
    per_action: dict[str, list[dict]] = {}
    for t in rows:
        per_action.setdefault(t["operation"], []).append(t)
    summary = {}
    for action, rows in per_action.items():
        summary[action] = {
            "count": len(rows),
            "median_transition_s": statistics.median(r["transition_s"] for r in rows),
            "median_details": _median_details([r["details"] for r in rows]),
        }
    return summary


def _median_details(details: list[dict]) -> dict:
    keys = {k for d in details for k, v in d.items() if isinstance(v, int | float)}
    return {k: statistics.median(d[k] for d in details if k in d) for k in sorted(keys)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=3, help="times through every operation")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds between operations")
    parser.add_argument("--quick", action="store_true", help="one cycle: checks it works")
    parser.add_argument("--faults", action="store_true",
                        help="then kill a worker, kill a PS and freeze a worker")
    parser.add_argument("--source", help="measure this checkout's src instead (see above)")
    parser.add_argument("--out", default="benchmarks/results/runtime_elastic.json")
    args = parser.parse_args(argv)
    cycles = 1 if args.quick else args.cycles
    before = load_note()
    with tempfile.TemporaryDirectory(prefix="rightsize-bench-") as tmp:
        result = run(cycles, args.settle, Path(tmp), args.faults)
    report = result["report"]
    rows = transitions(report)
    summary = summarize(rows)
    recoveries = fault_recoveries(report, result["faults"])
    for action, row in summary.items():
        print(f"{action:>16}: {row['median_transition_s']:7.2f} s (median of {row['count']})",
              file=sys.stderr)  # fmt: skip
    for row in recoveries:
        print(f"{row['fault']:>16}: noticed {row['noticed_s']} s, recovered {row['recovered_s']} s"
              f" after", file=sys.stderr)  # fmt: skip
    out = {
        "benchmark": "runtime_elastic",
        "simulated": False,
        "isolation": report["isolation"],
        "load_before": before,
        "load_after": load_note(),
        "cycles": cycles,
        "source": args.source or "this checkout",
        "summary": summary,
        "faults": recoveries,
        "transitions": rows,
        "exactly_once": report["accounting"].get("exactly_once"),
        "warnings": result["warnings"],
    }
    write_report(args.out, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
