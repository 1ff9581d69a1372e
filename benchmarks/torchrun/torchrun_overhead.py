"""What `rightsize torchrun` costs a script: its throughput against plain `torchrun`'s.

Issue 37 item 7: the same script, the same ranks, under plain ``torchrun --standalone`` and
under ``rightsize torchrun --policy static`` (each rank in a cgroup with a CPU quota and a
memory limit, the measuring hooks installed, a reporter thread); goal: at most 3% slower.
The script times its own epochs (examples/torchrun/train_ddp.py: DDP + DistributedSampler
+ a snapshot every epoch), so the numbers are the script's, not rightsize's. Runs
alternate (plain, rightsize, plain, ...) so that the host's drift lands on both; the
overhead is each pair's ratio of median steady epoch times, quoted as the median and
range over pairs.

    python benchmarks/torchrun/torchrun_overhead.py --repeats 5 --out benchmarks/results/torchrun_overhead.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from benchmarks.torchrun.torchrun_common import (
    ROOT,
    clean,
    plain_torchrun,
    rightsize_torchrun,
)

SCRIPT = ROOT / "examples" / "torchrun" / "train_ddp.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--samples", type=int, default=16384)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--out", default="benchmarks/results/torchrun_overhead.json")
    args = parser.parse_args(argv)
    script_args = ["--epochs", str(args.epochs), "--samples", str(args.samples), "--width",
                   str(args.width)]  # fmt: skip
    cpu = 2.0 / args.nproc  # each rank's share of a 2-cpu budget: what it gets anyway
    options = ["--nproc-per-node", str(args.nproc), "--cpu-per-proc", f"{cpu:g}",
               "--budget-cpu", "2", "--policy", "static"]  # fmt: skip
    pairs, notes = [], [load_note()]
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        for repeat in range(args.repeats):
            clean(cwd, "snapshot.pt")
            plain = plain_torchrun(SCRIPT, script_args, args.nproc, cwd)
            clean(cwd, "snapshot.pt")
            ours, report = rightsize_torchrun(SCRIPT, script_args, options, cwd)
            # torchrun itself fails now and then after the last epoch (gloo's teardown aborts a
            # rank: "terminate called without an active exception"): its epochs still count
            if len(plain.epoch_s) < args.epochs or ours.returncode:
                raise SystemExit(f"a run failed:\n{plain.output[-2000:]}\n{ours.output[-2000:]}")
            row = pair_row(plain, ours, report)
            pairs.append(row)
            print(f"repeat {repeat}: plain {row['plain_epoch_s']:.3f}s, rightsize "
                  f"{row['rightsize_epoch_s']:.3f}s per epoch: {row['overhead']:+.1%}", flush=True)
    notes.append(load_note())
    overheads = [p["overhead"] for p in pairs]
    result = {
        "script": str(SCRIPT.relative_to(ROOT)), "nproc": args.nproc,
        "cpu_per_proc": cpu, "script_args": script_args, "pairs": pairs,
        "overhead_median": statistics.median(overheads),
        "overhead_min": min(overheads), "overhead_max": max(overheads),
        "startup_extra_s_median": statistics.median(p["startup_extra_s"] for p in pairs),
        "load": notes,
    }  # fmt: skip
    write_report(args.out, result)
    print(f"overhead median {result['overhead_median']:+.1%} "
          f"({result['overhead_min']:+.1%} .. {result['overhead_max']:+.1%}); {args.out}")
    return 0


def pair_row(plain, ours, report) -> dict:
    """One plain/rightsize pair: median steady epoch times, their ratio, and what the launch
    adds (wall time beyond the epochs)."""
    a, b = statistics.median(plain.steady_epoch_s()), statistics.median(ours.steady_epoch_s())
    return {
        "plain_epoch_s": a, "rightsize_epoch_s": b, "overhead": b / a - 1,
        "plain_epochs_s": list(plain.epoch_s), "rightsize_epochs_s": list(ours.epoch_s),
        "plain_wall_s": plain.wall_s, "rightsize_wall_s": ours.wall_s,
        "startup_extra_s": (ours.wall_s - sum(ours.epoch_s)) - (plain.wall_s - sum(plain.epoch_s)),
        "plain_exit": plain.returncode,
        "isolation": report["isolation"] if report else None,
        "launch_s": report["timeline"][0]["transition_s"] if report else None,
    }  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
