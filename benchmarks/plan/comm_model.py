"""Accuracy of the learned allreduce bandwidth model on held-out probes (Srift §4.2, §5.3).

Probes real allreduces among local processes (gloo) over 4 B - 512 MB, world
sizes 2-4 and 1-2 concurrent transfers, repeated ``--rounds`` times in fresh
process groups; holds out a random 10% of the records (stratified by buffer
size), trains on the rest, and reports the MAPE of each candidate model and of
the one cross-validation chose, for small (<= MTU) and large (> MTU) buffers
separately. Srift reports 23.9% (small) and 11.7% (large) on EC2. The model
trained on all records is saved for ``benchmarks/plan/planner_accuracy.py``.

Usage:
    python benchmarks/plan/comm_model.py --rounds 3 --out benchmarks/results/comm_model.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.errors import mape_percent
from rightsize.core.units import parse_memory
from rightsize.perf.comm_learned import CANDIDATES, LearnedCommModel, _fit_candidate, features
from rightsize.profiling.comm_probe import ProbeRecord, ProbeSettings, probe, records_from_dicts


def held_out_split(records: list[ProbeRecord], fraction: float, seed: int) -> tuple[list, list]:
    """A random ``fraction`` of each buffer size's records is held out."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for size in sorted({r.size_bytes for r in records}):
        group = [r for r in records if r.size_bytes == size]
        order = rng.permutation(len(group))
        cut = max(1, round(fraction * len(group)))
        test += [group[i] for i in order[:cut]]
        train += [group[i] for i in order[cut:]]
    return train, test


def halves(mtu: int) -> tuple:
    """(name, predicate) of the learned model's two halves, split at the MTU (Srift §4.2)."""
    return (("small", lambda r: r.size_bytes <= mtu), ("large", lambda r: r.size_bytes > mtu))


def candidate_errors(train, test, mtu: int, seed: int) -> dict:
    """Held-out MAPE of every candidate, per half, so the chosen one can be seen in context."""
    out = {}
    for half, keep in halves(mtu):
        tr, te = [r for r in train if keep(r)], [r for r in test if keep(r)]
        y_tr, y_te = (
            np.array([r.bus_bytes_per_s for r in tr]),
            np.array([r.bus_bytes_per_s for r in te]),
        )
        out[half] = {}
        for name, objective, log_target in CANDIDATES:
            booster = _fit_candidate(features(tr), y_tr, objective, log_target, seed)
            pred = booster.predict(features(te))
            out[half][name] = mape_percent(np.exp(pred) if log_target else pred, y_te)
    return out


def noise_floor(train, test, mtu: int) -> dict:
    """Held-out MAPE of predicting each record by the mean of the *same* grid point's other
    rounds: what the probes' own spread lets any model reach, for context."""
    points: dict[tuple, list[float]] = {}
    for r in train:
        points.setdefault((r.size_bytes, r.world, r.concurrent), []).append(r.bus_bytes_per_s)
    out = {}
    for half, keep in halves(mtu):
        te = [r for r in test if keep(r) and (r.size_bytes, r.world, r.concurrent) in points]
        guess = np.array([np.mean(points[(r.size_bytes, r.world, r.concurrent)]) for r in te])
        out[half] = mape_percent(guess, np.array([r.bus_bytes_per_s for r in te]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-size", default="512Mi")
    parser.add_argument("--records", help="reuse probe records (JSON) instead of probing")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/comm_model.json")
    parser.add_argument("--model-out", default="benchmarks/results/comm_learned_model.json")
    parser.add_argument("--records-out", default="benchmarks/results/comm_probes.json")
    args = parser.parse_args(argv)
    if args.records:
        records = records_from_dicts(json.loads(Path(args.records).read_text()))
    else:
        settings = ProbeSettings(
            world_sizes=(2, 3, 4), max_bytes=parse_memory(args.max_size), rounds=args.rounds
        )
        with tempfile.TemporaryDirectory() as scratch:
            records = probe(
                settings, Path(scratch), lambda m: print(f"  {m}", file=sys.stderr, flush=True)
            )
        Path(args.records_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.records_out).write_text(json.dumps([r.to_dict() for r in records]))
    train, test = held_out_split(records, 0.1, args.seed)
    model = LearnedCommModel.fit(train, args.seed)
    predicted, actual = model.predict_records(test), np.array([r.bus_bytes_per_s for r in test])
    small = np.array([r.size_bytes <= model.mtu_bytes for r in test])
    report = {
        "benchmark": "comm_model",
        "records": len(records), "train": len(train), "held_out": len(test), "mtu_bytes": model.mtu_bytes,
        "chosen": {"small": model.small.candidate, "large": model.large.candidate},
        "cv_mape_percent": {"small": model.small.cv_mape, "large": model.large.cv_mape},
        "held_out_mape_percent": {
            "small": mape_percent(predicted[small], actual[small]),
            "large": mape_percent(predicted[~small], actual[~small]),
        },
        "held_out_mape_percent_by_candidate": candidate_errors(train, test, model.mtu_bytes, args.seed),
        "noise_floor_mape_percent": noise_floor(train, test, model.mtu_bytes),
        "simulated": False,
    }  # fmt: skip
    LearnedCommModel.fit(records, args.seed).save(args.model_out)
    write_report(args.out, report)
    summary = ("chosen", "held_out_mape_percent", "noise_floor_mape_percent")
    print(json.dumps({k: report[k] for k in summary}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
