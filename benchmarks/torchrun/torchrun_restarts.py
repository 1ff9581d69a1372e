"""What a change of world size costs a torchrun script under rightsize, part by part.

Issue 37 item 7: a script's group is restarted at a new world size by torchrun's contract
(stop every rank, a new store, the script reloads its own checkpoint). This runs a script
under the master with a policy that alternates world sizes every ``--every`` seconds (the
payback rule off: every move is carried out) and reads each restart's measured parts from
the report's timeline: waiting for the script's next save, stopping the old ranks,
launching the new ones until all registered, their ``init_process_group``, the script's own
``torch.load``, and its first optimizer step (``restart_s`` is the whole: stop to first step).

    python benchmarks/torchrun/torchrun_restarts.py --out benchmarks/results/torchrun_restarts.json
    python benchmarks/torchrun/torchrun_restarts.py --script PATH --args "..." --out ...  # any script
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from benchmarks.torchrun.torchrun_common import ROOT
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import Strategy, parse_job_spec
from rightsize.runtime.master import Master
from rightsize.scaling.api import Action, Plan, Policy

SCRIPT = ROOT / "examples" / "torchrun" / "train_ddp.py"
ARGS = "--epochs 200 --samples 8192 --width 256"
PARTS = ("waited_for_save_s", "stop_s", "launch_s", "rendezvous_s", "reloaded_s",
         "first_step_s", "restart_s", "lost_s")  # fmt: skip


class Alternate(Policy):
    """World sizes in turn (``worlds``), one move every ``every_s``, each rank with ``cpu``."""

    name = "alternate"
    strategies = frozenset({Strategy.ALLREDUCE})

    def __init__(self, worlds: list[int], every_s: float, cpu: float, memory: int) -> None:
        self.worlds, self.every_s, self.node = list(worlds), every_s, Resources(cpu, memory)

    def initial_shape(self, budget, free):
        return None

    def decide(self, obs):
        if not self.worlds or obs.time_s - obs.shape_since_s < self.every_s:
            return None
        n = self.worlds.pop(0)
        shape = ClusterShape.from_counts(0, n, self.node, self.node)
        action = Action.ADD_WORKER if n > obs.shape.n_workers else Action.REMOVE_WORKER
        return Plan(shape, action, f"benchmark: world {obs.shape.n_workers} -> {n}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", default=str(SCRIPT))
    parser.add_argument("--args", default=ARGS, help="the script's arguments, one string")
    parser.add_argument("--worlds", default="2,1,2,1,2,1", help="world sizes after the first (1)")
    parser.add_argument("--every", type=float, default=8.0, help="seconds between moves")
    parser.add_argument("--cpu", type=float, default=1.0, help="each rank's cpu")
    parser.add_argument("--out", default="benchmarks/results/torchrun_restarts.json")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()  # the run happens in a folder of its own
    worlds = [int(w) for w in args.worlds.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        data = {"name": "restarts", "script": str(Path(args.script).resolve()),
                "args": shlex.split(args.args), "budget": {"cpu": 2, "memory": "8Gi"},
                "initial_shape": {"workers": {"count": 1, "cpu": args.cpu, "memory": "2Gi"}},
                "checkpoint": {"dir": str(Path(tmp) / "ckpt")},
                "runtime": {"restart_payback": False, "max_restarts": 10}}  # fmt: skip
        spec = parse_job_spec(yaml.safe_load(yaml.safe_dump(data)))
        import os

        os.chdir(tmp)  # the script's snapshot lands here
        before = load_note()
        report = Master(spec, Alternate(worlds, args.every, args.cpu, 2 * 2**30), fresh=True).run()
    rows = [{"from": int(t["reason"].split("world ")[1].split(" ->")[0]),
             "to": t["details"]["world"], **{k: t["details"].get(k) for k in PARTS}}
            for t in report["timeline"][1:] if t["applied"]]  # fmt: skip
    result = {
        "script": args.script, "args": args.args, "every_s": args.every, "cpu": args.cpu,
        "restarts": rows, "launch": report["script"]["groups"][0],
        "median": {k: statistics.median(r[k] for r in rows if r.get(k) is not None)
                   for k in PARTS if any(r.get(k) is not None for r in rows)},
        "moves": report["moves"], "wall_time_s": report["wall_time_s"],
        "load": [before, load_note()],
    }  # fmt: skip
    write_report(out, result)
    for row in rows:
        parts = ", ".join(f"{k} {row[k]:.2f}" for k in PARTS if row.get(k) is not None)
        print(f"{row['from']} -> {row['to']} ranks: {parts}")
    print(f"median restart {result['median'].get('restart_s', float('nan')):.2f}s; {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
