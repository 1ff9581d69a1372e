"""How long ``rightsize profile`` takes and what it warns, for one checkout (issue 40 item 4).

Runs ``rightsize profile WORKLOAD`` with the checkout's own defaults (``--src``: the
``src/`` folder of the checkout to measure, e.g. main's for "before") in a subprocess,
and records its wall time, the host's load around it (the machine is shared), the
lines it printed to stderr (the announcement, progress and ``warning:`` lines), and what
the profile holds: B_max and why, the timed batches, the noisy batches and falling
segments it recorded, and how many segments of negative slope the compute model fitted
from it has with the old fit (``monotone=False``) and the monotone one (this checkout's
``perf/compute.py``). Each run is stored under its ``--label`` in the result file, beside
the others.

    .venv/bin/python benchmarks/plan/profile_budget.py --label before --src /work/main/src
    .venv/bin/python benchmarks/plan/profile_budget.py --label after
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import ROOT, write_report
from benchmarks.lib.load import load_note
from rightsize.perf.compute import ComputeModel
from rightsize.profiling.profile import Profile


def falling_pieces(model: ComputeModel) -> int:
    """Segments of the total-time curve where time falls as the batch grows."""
    curve = model.total
    return sum(curve.slope_intercept(i)[0] < 0 for i in range(curve.segments))


def measure(workload: str, src: Path, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "profile.json"
        argv = [sys.executable, "-m", "rightsize", "profile", workload, "--out", str(out), *extra]
        env = {**os.environ, "PYTHONPATH": str(src)}  # before the venv's own path to src
        load_before = load_note()
        start = time.monotonic()
        done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True)
        wall_s = time.monotonic() - start
        load_after = load_note()
        if done.returncode != 0:
            raise SystemExit(f"profile failed ({done.returncode}): {done.stderr[-2000:]}")
        profile = Profile.load(out)
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return {
        "argv": argv[2:4] + extra,
        "src": str(src),
        "wall_s": round(wall_s, 1),
        "load_before": load_before,
        "load_after": load_after,
        "bmax": profile.bmax,
        "bmax_limited_by": profile.bmax_limited_by,
        "batches": [s.batch for s in profile.samples],
        "repeats_kept": {str(s.batch): len(s.forward_runs_s) for s in profile.samples},
        "noisy_batches": list(profile.noisy_batches),
        "falling_segments": [list(s) for s in profile.falling_segments],
        "falling_pieces": {
            "old_fit": falling_pieces(ComputeModel.from_profile(profile, monotone=False)),
            "monotone_fit": falling_pieces(ComputeModel.from_profile(profile, monotone=True)),
        },
        "warnings": [line for line in lines if line.startswith("warning:")],
        "stderr": lines[:60],  # the announcement, progress and warnings (a budget's are few)
        "stderr_lines": len(lines),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--workload", default="resnet18")
    parser.add_argument("--src", type=Path, default=ROOT / "src",
                        help="the src/ of the checkout to measure (default this one)")  # fmt: skip
    parser.add_argument("--label", required=True, help="e.g. before, after")
    parser.add_argument("--extra", default="", help="further profile arguments, one string")
    parser.add_argument("--out", default="benchmarks/results/profile_budget.json")
    args = parser.parse_args(argv)
    run = measure(args.workload, args.src.resolve(), args.extra.split())
    print(json.dumps(run, indent=2))
    path = Path(args.out)
    runs = json.loads(path.read_text()).get("runs", {}) if path.exists() else {}
    runs[args.label] = run
    write_report(path, {"workload": args.workload, "runs": runs}, args=argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
