"""Accuracy of Srift's piecewise-linear compute model on this machine (Srift §4.1, §5.3).

For each workload: profile it with the profiler's dense sampling (B_max under a
memory limit; latency at Srift's four batches 1, B_max/3, 2·B_max/3, B_max and
at every power of two between them). Then time all those batches again together
with held-out batch sizes the models never saw (3·2^k or 5·2^k, or 7·2^k under a small B_max; never a power of two), in
one interleaved session, and report the mean absolute percentage error (MAPE)
of forward, backward and total (forward + backward) time on the held-out
batches, for the faithful ``srift`` model (four samples) and the ``dense`` one:

- same-session: models fitted to the session's own samples — the model's error;
- cross-session: models fitted to the profile — what a user sees when training
  runs minutes after profiling on a machine whose speed drifts;
- split-half noise: medians of odd against even rounds of the session — the
  measurement noise, which bounds how small a measured error can be.

Usage:
    python benchmarks/plan/compute_model.py --out benchmarks/results/compute_model.json
    python benchmarks/plan/compute_model.py --workloads mlp3,small-cnn --repeats 5   # quicker
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.errors import mape_percent
from rightsize.core.units import parse_memory
from rightsize.perf.compute import ComputeModel
from rightsize.profiling.bmax import BmaxSearch
from rightsize.profiling.profile import LatencySample, srift_sample_batches
from rightsize.profiling.profiler import Profiler, ProfilerSettings
from rightsize.workloads import WorkloadRegistry


@dataclass(frozen=True)
class Case:
    workload: str
    dataset: str
    memory_limit: str
    max_batch: int = 4096


# Memory limits stand in for a device's memory and keep B_max (and the CPU time of
# a step at B_max) moderate on a 2-core machine.
CASES = {
    "mlp3": Case("mlp3", "synthetic-cifar", "256Mi", max_batch=2048),
    "small-cnn": Case("small-cnn", "synthetic-cifar", "256Mi"),
    "resnet18": Case("resnet18", "synthetic-cifar", "384Mi"),
    "mobilenetv2": Case("mobilenetv2", "synthetic-cifar", "384Mi"),
    "gpt-small": Case("gpt-small", "synthetic-text", "512Mi"),
    "bilstm": Case("bilstm", "synthetic-reviews", "384Mi"),
    "wide-deep": Case("wide-deep", "synthetic-criteo", "512Mi"),
    "deepfm": Case("deepfm", "synthetic-criteo", "512Mi"),
}


def held_out_batches(bmax: int, train: set[int], count: int) -> list[int]:
    """Up to ``count`` batches below B_max, spread over the range, that the models never saw.

    Candidates are 3·2^k and 5·2^k, then 7·2^k if those are too few (a small B_max):
    none is a power of two, so no held-out batch is a dense training point.
    """
    candidates: list[int] = []
    for multipliers in ((3, 5), (7,)):
        forms = {m * 2**k for m in multipliers for k in range(20)}
        candidates += [b for b in forms if b < bmax and b not in train]
        if len(candidates) >= count:
            break
    candidates.sort()
    if len(candidates) <= count:
        return candidates
    step = (len(candidates) - 1) / (count - 1)
    return sorted({candidates[round(i * step)] for i in range(count)})


def errors(model: ComputeModel, measured: list[LatencySample]) -> dict[str, float]:
    predictions = [model.predict(s.batch) for s in measured]
    return {
        "forward": mape_percent([p.forward_s for p in predictions], [s.forward_s for s in measured]),
        "backward": mape_percent([p.backward_s for p in predictions], [s.backward_s for s in measured]),
        "total": mape_percent([p.total_s for p in predictions], [s.total_s for s in measured]),
    }


def split_half_noise(samples: list[LatencySample]) -> float:
    """MAPE between medians of odd and even rounds of the same session (total time)."""
    diffs = []
    for s in samples:
        totals = [f + b for f, b in zip(s.forward_runs_s, s.backward_runs_s, strict=True)]
        odd, even = statistics.median(totals[1::2]), statistics.median(totals[::2])
        diffs.append(abs(odd - even) / even)
    return 100 * statistics.fmean(diffs)


def drift(first: list[LatencySample], second: list[LatencySample]) -> dict[str, float]:
    """Max and median relative change of the same batch's median total time between sessions."""
    later = {s.batch: s.total_s for s in second}
    changes = [100 * abs(later[s.batch] - s.total_s) / s.total_s for s in first if s.batch in later]
    return {"max": max(changes), "median": statistics.median(changes)}


def fit_models(
    samples: list[LatencySample], srift: list[int], dense: list[int]
) -> dict[str, ComputeModel]:
    by_batch = {s.batch: s for s in samples}
    return {
        "srift": ComputeModel.fit([by_batch[b] for b in srift], "srift"),
        "dense": ComputeModel.fit([by_batch[b] for b in dense], "dense"),
    }


def run_case(case: Case, repeats: int, held_out: int, log) -> dict:
    """Profile, then time every batch again in one interleaved session and compare.

    same-session: models fitted to the session's Srift (or dense) batches, tested on
    its held-out batches — the model's own error. cross-session: models fitted to
    the profile, tested on the later session — what a user sees when training runs
    after profiling on a machine whose speed drifts.
    """
    workload = WorkloadRegistry().get(case.workload, case.dataset)
    started = time.perf_counter()
    settings = ProfilerSettings(
        warmup=2, repeats=repeats, search=BmaxSearch(case.max_batch), sampling="dense"
    )
    profiler = Profiler(torch.device("cpu"), settings, log)
    profile = profiler.run(workload, parse_memory(case.memory_limit))
    srift = srift_sample_batches(profile.bmax, profile.min_batch)
    dense = sorted({s.batch for s in profile.samples})
    test = held_out_batches(profile.bmax, set(dense), held_out)
    session = profiler.time_batches(workload, dense + test)
    measured = [s for s in session if s.batch in test]
    same = fit_models(session, srift, dense)
    cross = fit_models(list(profile.samples), srift, dense)
    return {
        "workload": case.workload,
        "dataset": case.dataset,
        "memory_limit": case.memory_limit,
        "bmax": profile.bmax,
        "bmax_limited_by": profile.bmax_limited_by,
        "srift_batches": srift,
        "dense_batches": dense,
        "held_out_batches": test,
        "same_session_mape_percent": {m: errors(model, measured) for m, model in same.items()},
        "cross_session_mape_percent": {m: errors(model, measured) for m, model in cross.items()},
        "split_half_noise_total_mape_percent": split_half_noise(session),
        "profile_vs_session_same_batch_percent": drift(list(profile.samples), session),
        "compute_cv": profile.compute_cv,
        "held_out": [
            {
                "batch": s.batch,
                "measured_total_s": s.total_s,
                **{f"{m}_total_s": model.predict(s.batch).total_s for m, model in same.items()},
            }
            for s in measured
        ],
        "profile_samples": [_medians(s) for s in profile.samples],
        "session_samples": [_medians(s) for s in session],
        "seconds": time.perf_counter() - started,
    }


def _medians(sample: LatencySample) -> dict:
    return {
        "batch": sample.batch,
        "forward_s": sample.forward_s,
        "backward_s": sample.backward_s,
        "total_s": sample.total_s,
        "total_cv": sample.total_cv,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--workloads",
        default=",".join(CASES),
        help="comma-separated subset of: " + ", ".join(CASES),
    )
    parser.add_argument(
        "--repeats", type=int, default=10, help="timed steps per batch (median kept)"
    )
    parser.add_argument(
        "--held-out", type=int, default=5, help="held-out batch sizes per workload (>= 4)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads; 1 by default because steal time on a shared second "
        "vCPU makes 2-thread step times noise-dominated (see docs/benchmarks.md)",
    )
    parser.add_argument("--out", default="benchmarks/results/compute_model.json")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        if not args.quiet:
            print(f"    {message}", file=sys.stderr, flush=True)

    torch.set_num_threads(args.threads)
    results = []
    for name in args.workloads.split(","):
        if name not in CASES:
            parser.error(f"unknown workload {name!r}; choose from {', '.join(CASES)}")
        print(f"== {name}", file=sys.stderr, flush=True)
        results.append(run_case(CASES[name], args.repeats, args.held_out, log))
        r = results[-1]
        same, cross = r["same_session_mape_percent"], r["cross_session_mape_percent"]
        print(
            f"   B_max {r['bmax']}: total MAPE srift {same['srift']['total']:.1f}% "
            f"(cross-session {cross['srift']['total']:.1f}%), dense {same['dense']['total']:.1f}% "
            f"(cross-session {cross['dense']['total']:.1f}%), split-half noise "
            f"{r['split_half_noise_total_mape_percent']:.1f}%",
            file=sys.stderr,
            flush=True,
        )
    summary = {
        kind: {
            method: {
                phase: statistics.fmean(r[f"{kind}_mape_percent"][method][phase] for r in results)
                for phase in ("forward", "backward", "total")
            }
            for method in ("srift", "dense")
        }
        for kind in ("same_session", "cross_session")
    }
    report = {
        "benchmark": "compute_model",
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
        },
        "repeats": args.repeats,
        "results": results,
        "mean_mape_percent": summary,
        "mean_split_half_noise_percent": statistics.fmean(
            r["split_half_noise_total_mape_percent"] for r in results
        ),
        "simulated": False,
    }
    out = Path(args.out)
    write_report(out, report)
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
