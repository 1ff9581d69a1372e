"""Where the DDP tutorial's overhead under ``rightsize torchrun`` comes from (issue 37 item 7).

The tutorial (``public_scripts.py``'s ``ddp-tutorial``: ~1-ms steps of gloo allreduce between
two ranks) reads 10-13% slower per epoch under ``rightsize torchrun`` than under plain
``torchrun``, where nanoGPT and train_ddp read within 1%. This alternates three launches of
the same script, round after round, so that the host's drift falls on all alike:

- ``plain``: ``torchrun --standalone --nproc-per-node 2``;
- ``plain-cgroup``: the same, its whole process tree inside one CPU cgroup with a quota of
  2 cores and a 4 GiB memory limit — the shape of a two-rank job's pooled cgroup
  (``runtime.cpu_pool``), without rightsize's launcher, hooks or master;
- ``plain-cgroup-unlimited``: the same cgroup with no CPU quota (the kernel's default):
  group scheduling without CFS bandwidth control;
- ``plain-cgroup-cpu`` and ``plain-cgroup-memory`` (``--variants``): the CPU controllers'
  cgroup alone (no quota) or the memory controller's alone (the 4 GiB limit);
  ``plain-cgroup-weighted``: the CPU controllers' alone with the weight of its 2 cores
  (``cpu.shares`` 2048, as kubelet sets a pod's from its request) instead of one task's;
- ``rightsize``: ``rightsize torchrun --nproc-per-node 2 --cpu-per-proc 1 --policy static``.

Per round, each variant's seconds per epoch (rank 0's epoch lines, timed as they appear) and
its ratio to the round's plain run; medians and ranges over rounds.

    python benchmarks/torchrun/torchrun_overhead_parts.py --dir /tmp/public --rounds 5 \\
        --out benchmarks/results/torchrun_overhead_parts.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from benchmarks.torchrun.public_scripts import cases, ours, plain
from rightsize.runtime.backends.cgroups import Hierarchy, NodeCgroup, detect
from rightsize.runtime.backends.local import _enter

VARIANTS = ("plain", "plain-cgroup", "plain-cgroup-unlimited", "rightsize")
MORE_VARIANTS = ("plain-cgroup-cpu", "plain-cgroup-memory", "plain-cgroup-weighted")
#: cgroup v1's weight of one task (``cpu.shares``); a cgroup of N cores' weight is N times it.
SHARES_PER_CORE = 1024
#: The job-level cgroup's quota and limit: what a two-rank job of 1 CPU each pools.
POOL_CORES, POOL_MEMORY = 2.0, 4 * 2**30


def in_cgroup(quota: bool, controllers: str = "all") -> tuple[NodeCgroup, tuple[str, ...]]:
    """A fresh cgroup outside rightsize's own tree (whose jobs the service counts), with the
    pool's quota or none, in every controller or only the CPU's or the memory's (cgroup
    v1), and the command prefix that runs a program inside it."""
    hierarchy = detect()
    if controllers != "all":
        if hierarchy.version != 1:
            raise SystemExit("error: --variants: one controller alone needs cgroup v1")
        keep = ("memory",) if controllers == "memory" else ("cpu", "cpuacct")
        hierarchy = Hierarchy(1, {c: b for c, b in hierarchy.bases.items() if c in keep})
    cgroup = NodeCgroup(hierarchy, Path("rightsize-diagnostic") / "plain")
    cgroup.create()
    if quota:
        cgroup.set_cpu(POOL_CORES)
    if controllers == "weighted":
        shares = cgroup.dirs["cpu"] / "cpu.shares"
        shares.write_text(str(round(POOL_CORES * SHARES_PER_CORE)))
    if controllers in ("all", "memory"):
        cgroup.set_memory(POOL_MEMORY)
    return cgroup, tuple(_enter(cgroup.procs_files))


def run(variant: str, case: dict) -> dict:
    if variant == "plain":
        return plain(case)
    if variant.startswith("plain-cgroup"):
        controllers = variant.rsplit("-", 1)[1] if variant in MORE_VARIANTS else "all"
        cgroup, prefix = in_cgroup(quota=variant == "plain-cgroup", controllers=controllers)
        try:
            return plain(case, prefix)
        finally:
            cgroup.remove()
    result = ours(case, ["--nproc-per-node", "2", "--cpu-per-proc", "1", "--policy", "static"])
    if result["code"]:
        raise SystemExit(f"error: rightsize torchrun failed: {result['stderr']}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, required=True,
                        help="the prepared public scripts (public_scripts.py --prepare)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated, of " + ", ".join(VARIANTS + MORE_VARIANTS)
                        + " (plain always runs: the ratios' base)")  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/torchrun_overhead_parts.json")
    args = parser.parse_args(argv)
    variants = ("plain", *(v for v in args.variants.split(",") if v != "plain"))
    for v in variants:
        if v not in VARIANTS + MORE_VARIANTS:
            raise SystemExit(f"error: --variants: unknown {v!r}")
    case = cases(args.dir, 0, args.epochs)["ddp-tutorial"]
    if not (case["dir"] / case["script"]).exists():
        raise SystemExit(f"error: --dir: no {case['script']} in {case['dir']} (run "
                         "public_scripts.py --prepare first)")  # fmt: skip
    rounds = []
    for i in range(args.rounds):
        order = variants if i % 2 == 0 else variants[::-1]
        row = {}
        for variant in order:
            result = run(variant, case)
            row[variant] = {"epoch_s": result["epoch_s"], "wall_s": result["wall_s"]}
        for variant in variants:
            row[variant]["over_plain"] = row[variant]["epoch_s"] / row["plain"]["epoch_s"]
        rounds.append(row)
        print(f"round {i + 1}: " + ", ".join(
            f"{v} {row[v]['epoch_s']:.3f} s/epoch ({row[v]['over_plain'] - 1:+.1%})"
            for v in variants), file=sys.stderr, flush=True)  # fmt: skip
    summary = {}
    for variant in variants:
        ratios = [r[variant]["over_plain"] for r in rounds]
        epochs = [r[variant]["epoch_s"] for r in rounds]
        summary[variant] = {"epoch_s_median": statistics.median(epochs),
                            "epoch_s_range": [min(epochs), max(epochs)],
                            "over_plain_median": statistics.median(ratios) - 1,
                            "over_plain_range": [min(ratios) - 1, max(ratios) - 1]}  # fmt: skip
        print(f"{variant:22s} median {summary[variant]['epoch_s_median']:.3f} s/epoch, "
              f"{summary[variant]['over_plain_median']:+.1%} over plain", file=sys.stderr)
    write_report(args.out, {"benchmark": "torchrun_overhead_parts", "load": load_note(),
                            "rounds": rounds, "summary": summary}, args=argv)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
