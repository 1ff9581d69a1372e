"""Right-sizing torchrun scripts: each policy from a too-small start against the best static shape.

Issue 37 item 7. For each script (``CASES``, or ``--script``):

1. **sweep** the static shapes a 2-cpu budget allows (1 rank of 1 and 2 cpu; 2 ranks of
   0.5 and 1; the start's 1 rank of 0.5 with ``--with-start``): each runs the script's
   whole job under ``rightsize torchrun --policy static``; the **best static** shape is the
   one with the shortest JCT (the report's wall time);
2. run it from a **too-small start** (1 rank of 0.5 cpu on the 2-cpu budget) under each
   policy, and report its JCT over the best static's (goal: within 10%), its moves, and for
   each move taken whether it paid, judged afterwards from what was measured: the samples
   trained between the move and the next (or the end), ``n = v1 × Δt``, would have taken
   ``n / v0`` at the speed before; the move cost its restart (stop to first step) and the
   training it threw away (``lost_s``), trained again at ``v1``. It paid if
   ``n / v0 > Δt + restart_s + lost_s × v0 / v1``.

Every run happens in a directory of its own (no snapshot leaks between runs).

    python benchmarks/torchrun/torchrun_rightsizing.py --out benchmarks/results/torchrun_rightsizing.json
    python benchmarks/torchrun/torchrun_rightsizing.py --cases slow-data --policies goodput --quick
    python benchmarks/torchrun/torchrun_rightsizing.py --rounds-from benchmarks/results/torchrun_rightsizing.json \
        --public /tmp/public --cases nanogpt --rounds 3 --out benchmarks/results/torchrun_rightsizing_rounds.json
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.load import load_note
from benchmarks.torchrun.torchrun_common import ROOT, rightsize_torchrun

#: The static sweep: every shape of the 2-cpu budget at half-core steps but the start, which
#: holds a quarter of it (its time kept static is 1 x 0.5's: measured by --with-start).
STATIC_SHAPES = ((1, 1.0), (1, 2.0), (2, 0.5), (2, 1.0))
START = (1, 0.5)  # too small: a quarter of the budget
POLICIES = ("goodput", "dlrover", "nearchus+")


@dataclass(frozen=True)
class Case:
    name: str
    script: Path
    args: str
    why: str
    cwd: Path | None = None  # a script that reads its data from where it runs (nanoGPT)
    state: tuple[str, ...] = ()  # what it leaves in cwd that the next run must not find


CASES = {
    "slow-data": Case("slow-data", ROOT / "tests" / "scripts" / "slow_data.py",
                      "--epochs 80 --samples 2048 --delay-ms 1",
                      "DDP + DistributedSampler, each sample waits 1 ms to be read: I/O-bound"),
    "ddp-mlp": Case("ddp-mlp", ROOT / "examples" / "torchrun" / "train_ddp.py",
                    "--epochs 40 --samples 32768 --width 1024",
                    "DDP + DistributedSampler, a 3-layer MLP of width 1024: compute-bound"),
}  # fmt: skip


def nanogpt_case(public: Path) -> Case:
    """karpathy/nanoGPT's train.py as ``benchmarks/torchrun/public_scripts.py --prepare`` wrote it into
    ``public`` (it reads its data, and writes its checkpoint, where it runs)."""
    from public_scripts import NANOGPT_ARGS

    nano = public.resolve() / "nanogpt"
    return Case("nanogpt", nano / "train.py", " ".join(
        [*NANOGPT_ARGS, "--max_iters=6000", "--lr_decay_iters=6000"]),
        "karpathy/nanoGPT train.py: DDP, gradient accumulation, np.memmap batches",
        cwd=nano, state=("out-synthetic", "checkpoints"))  # fmt: skip


def known_cases(public: str | None) -> dict[str, Case]:
    """``CASES``, and nanoGPT where ``--public`` names its prepared copy."""
    return {**CASES, **({"nanogpt": nanogpt_case(Path(public))} if public else {})}


def shape_options(n: int, cpu: float) -> list[str]:
    return ["--nproc-per-node", str(n), "--cpu-per-proc", f"{cpu:g}", "--budget-cpu", "2",
            "--max-nproc", "2"]  # fmt: skip


def run_once(case: Case, options: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:  # the script's snapshots stay in here
        cwd = case.cwd or Path(tmp)
        for name in case.state:
            shutil.rmtree(cwd / name, ignore_errors=True)
        run, report = rightsize_torchrun(case.script, shlex.split(case.args), options, cwd,
                                         name=case.name)  # fmt: skip
    if run.returncode or report is None:
        raise SystemExit(f"{case.name} {options} failed:\n{run.output[-3000:]}")
    return report


def paid(move: dict, end_s: float, next_s: float | None) -> dict:
    """The move judged afterwards (see the module's doc)."""
    v0, v1 = move["samples_per_s_before"], move["samples_per_s_after"]
    restart, lost = move.get("restart_s") or move.get("transition_s") or 0.0, move.get("lost_s") or 0.0
    if not v0 or not v1:
        return {"paid": None, "net_s": None}
    span = (next_s if next_s is not None else end_s) - move["time_s"]
    net = span * v1 / v0 - (span + restart + lost * v0 / v1)
    return {"paid": net > 0, "net_s": net}


def policy_options(label: str) -> list[str]:
    """``goodput`` or ``goodput:grow_after_samples=3:growth=2`` (a policy with parameters,
    measured beside its defaults) as ``rightsize torchrun`` options."""
    name, *params = label.split(":")
    return ["--policy", name, *(f"--policy-param={p}" for p in params)]


def policy_row(case: Case, policy: str) -> dict:
    report = run_once(case, [*shape_options(*START), *policy_options(policy)])
    taken = [m for m in report["moves"] if m["taken"]]
    moves = []
    for i, move in enumerate(taken):
        after = taken[i + 1]["time_s"] if i + 1 < len(taken) else None
        moves.append({**{k: move[k] for k in ("time_s", "action", "reason", "restart_s",
                                               "lost_s", "samples_per_s_before",
                                               "samples_per_s_after")},
                      **paid(move, report["wall_time_s"], after)})  # fmt: skip
    declined = [m["reason"] for m in report["moves"] if not m["taken"] and "not taken" in m["reason"]]
    return {"policy": policy, "jct_s": report["wall_time_s"], "moves": moves,
            "declined": declined, "final_shape": report["final_shape"],
            "groups": len(report["script"]["groups"])}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    parser.add_argument("--script", help="a script of your own (with --args) instead")
    parser.add_argument("--args", default="", help="its arguments, one string")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="comma-separated; NAME:KEY=VALUE sets a parameter "
                             "(goodput:grow_after_samples=3)")
    parser.add_argument("--quick", action="store_true", help="two static shapes: checks it works")
    parser.add_argument("--with-start", action="store_true",
                        help="also sweep the start shape (1 rank of 0.5 cpu), kept static")
    parser.add_argument("--again-only", metavar="FILE",
                        help="only run each case's best static shape again, into a copy of "
                             "FILE's results (for results measured before this was built in)")
    parser.add_argument("--rounds-from", metavar="FILE",
                        help="no sweep: FILE's best static shape of each case, and in each of "
                             "--rounds rounds it and every policy in turn (the JCT ratio "
                             "within a round, so that the host's drift cancels)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--public", metavar="DIR", help="also the public scripts prepared in DIR "
                        "by benchmarks/torchrun/public_scripts.py --prepare (nanoGPT)")
    parser.add_argument("--out", default="benchmarks/results/torchrun_rightsizing.json")
    args = parser.parse_args(argv)
    if args.again_only:
        return again_only(Path(args.again_only), args, argv)
    if args.rounds_from:
        return rounds(Path(args.rounds_from), args, argv)
    cases = ([Case(Path(args.script).stem, Path(args.script).resolve(), args.args, "--script")]
             if args.script else [CASES[c] for c in args.cases.split(",") if c])  # fmt: skip
    if args.public:
        cases.append(nanogpt_case(Path(args.public)))
    shapes = STATIC_SHAPES[:2] if args.quick else STATIC_SHAPES
    if args.with_start:
        shapes = (START, *shapes)
    results = []
    for case in cases:
        sweep = []
        for n, cpu in shapes:
            report = run_once(case, [*shape_options(n, cpu), "--policy", "static"])
            sweep.append({"ranks": n, "cpu": cpu, "jct_s": report["wall_time_s"]})
            print(f"{case.name}: static {n} x {cpu:g} cpu: {report['wall_time_s']:.1f}s", flush=True)
        best = min(sweep, key=lambda r: r["jct_s"])
        rows = [policy_row(case, policy) for policy in args.policies.split(",")]
        # the host drifts over minutes: the best shape again, after the policies, and their
        # JCTs over the mean of its two runs
        again_options = [*shape_options(best["ranks"], best["cpu"]), "--policy", "static"]
        best["jct_again_s"] = run_once(case, again_options)["wall_time_s"]
        oracle = (best["jct_s"] + best["jct_again_s"]) / 2
        for row in rows:
            row["jct_over_best"] = row["jct_s"] / oracle
            unpaid = sum(1 for m in row["moves"] if m["paid"] is False)
            print(f"{case.name}: {row['policy']} from {START[0]} x {START[1]:g}: "
                  f"{row['jct_s']:.1f}s = {row['jct_over_best']:.2f} x best static "
                  f"({best['ranks']} x {best['cpu']:g}: {best['jct_s']:.1f}s, again "
                  f"{best['jct_again_s']:.1f}s); {len(row['moves'])} moves, {unpaid} did not "
                  f"pay, {len(row['declined'])} declined", flush=True)  # fmt: skip
        results.append({"case": case.name, "script": str(case.script), "args": case.args,
                        "why": case.why, "sweep": sweep, "best_static": best,
                        "start": {"ranks": START[0], "cpu": START[1]}, "policies": rows})  # fmt: skip
    write_report(args.out, {"results": results, "load": load_note()})
    return 0


def again_only(path: Path, args: argparse.Namespace, argv: list[str] | None) -> int:
    """Each case of a finished result's best static shape run again, and the policies' JCTs
    over the mean of its two runs."""
    import json

    data = json.loads(path.read_text())
    known = known_cases(args.public)
    for result in data["results"]:
        case, best = known[result["case"]], result["best_static"]
        options = [*shape_options(best["ranks"], best["cpu"]), "--policy", "static"]
        best["jct_again_s"] = run_once(case, options)["wall_time_s"]
        oracle = (best["jct_s"] + best["jct_again_s"]) / 2
        for row in result["policies"]:
            row["jct_over_best"] = row["jct_s"] / oracle
            print(f"{case.name}: {row['policy']} {row['jct_s']:.1f}s = {row['jct_over_best']:.2f} "
                  f"x best static ({best['jct_s']:.1f}s, again {best['jct_again_s']:.1f}s)")
    command = " ".join(argv or sys.argv[1:])
    data["again_command"] = "python benchmarks/torchrun/torchrun_rightsizing.py " + command
    write_report(args.out, data)
    return 0


def rounds(path: Path, args: argparse.Namespace, argv: list[str] | None) -> int:
    """Each case's best static shape (from a finished sweep) and every policy from the
    too-small start, in turn, ``--rounds`` times: each policy's JCT over the static one's of
    the same round, a median over rounds."""
    import json
    import statistics

    swept = {r["case"]: r["best_static"] for r in json.loads(path.read_text())["results"]}
    known = known_cases(args.public)
    policies = args.policies.split(",")
    results = []
    for name in [c for c in args.cases.split(",") if c]:
        case, best = known[name], swept[name]
        static = [*shape_options(best["ranks"], best["cpu"]), "--policy", "static"]
        runs = []
        for i in range(args.rounds):
            row = {"static_jct_s": run_once(case, static)["wall_time_s"]}
            for policy in policies:
                found = policy_row(case, policy)
                row[policy] = {"jct_s": found["jct_s"], "moves": found["moves"],
                               "declined": found["declined"],
                               "over_static": found["jct_s"] / row["static_jct_s"]}  # fmt: skip
            runs.append(row)
            print(f"{name} round {i + 1}: static {best['ranks']} x {best['cpu']:g} "
                  f"{row['static_jct_s']:.1f}s; " + ", ".join(
                      f"{p} {row[p]['jct_s']:.1f}s ({row[p]['over_static']:.2f})"
                      for p in policies), flush=True)  # fmt: skip
        summary = {}
        for policy in policies:
            ratios = [r[policy]["over_static"] for r in runs]
            summary[policy] = {"over_static_median": statistics.median(ratios),
                               "over_static_range": [min(ratios), max(ratios)],
                               "moves_that_did_not_pay": sum(
                                   m["paid"] is False for r in runs for m in r[policy]["moves"])}
        results.append({"case": name, "best_static": best, "rounds": runs,
                        "summary": summary})  # fmt: skip
    write_report(args.out, {"sweep_from": str(path), "results": results,
                            "load": load_note()})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
