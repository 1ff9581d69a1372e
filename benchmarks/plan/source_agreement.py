"""How far published GPU training measurements agree with each other (issue 18 item 2).

The held-out errors of the device model are bounded below by how much the calibration
sources disagree among themselves: no model that predicts one throughput for a
(model, GPU, precision, batch) can be closer to two sources than they are to each
other. This reads only the calibration table (benchmarks/data/measured/
gpu_training_throughput.csv; never the reserved Lambda or CM-DARE files) and reports:

- **absolute**: rows of the same model, GPU, precision and input size from different
  sources (or frameworks), per-GPU batches within 2x: the median of |a/b - 1| over
  every such pair, per-GPU throughput (multi-GPU rows divided by their GPUs);
- **ratio**: for two GPUs running the same model and precision, the throughput ratio
  g1/g2 as one source measured it against the same ratio from another source: the
  median of |r1/r2 - 1| — the floor under a leave-one-GPU-out ratio error.

    python benchmarks/plan/source_agreement.py --out benchmarks/results/source_agreement.json
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report

TABLE = Path(__file__).resolve().parents[1] / "data" / "measured" / "gpu_training_throughput.csv"
BATCH_RATIO = 2.0


def rows(path: Path = TABLE) -> list[dict]:
    with open(path, newline="") as handle:
        found = []
        for row in csv.DictReader(handle):
            gpus = int(row["num_gpus"])
            found.append({**row, "batch": int(row["per_gpu_batch"]),
                          "per_gpu": float(row["samples_per_s"]) / gpus, "gpus": gpus,
                          "origin": f"{row['source_id']}/{row['framework']}"})  # fmt: skip
    return found


def _close(a: dict, b: dict) -> bool:
    return max(a["batch"], b["batch"]) / min(a["batch"], b["batch"]) <= BATCH_RATIO


def absolute_pairs(table: list[dict]) -> list[dict]:
    groups = defaultdict(list)
    for row in table:
        groups[(row["model"], row["gpu"], row["precision"], row["image_size_or_seq_len"])].append(
            row
        )
    pairs = []
    for key, members in groups.items():
        for a, b in itertools.combinations(members, 2):
            if a["origin"] != b["origin"] and _close(a, b) and a["gpus"] == b["gpus"] == 1:
                pairs.append({"key": list(key), "a": a["origin"], "b": b["origin"],
                              "disagreement": abs(math.log(a["per_gpu"] / b["per_gpu"]))})  # fmt: skip
    return pairs


def ratio_pairs(table: list[dict]) -> list[dict]:
    by_origin = defaultdict(list)
    for row in table:
        if row["gpus"] == 1:
            by_origin[(row["origin"], row["model"], row["precision"],
                       row["image_size_or_seq_len"])].append(row)  # fmt: skip
    ratios = defaultdict(list)  # (model, precision, size, g1, g2) -> [(origin, ratio)]
    for (origin, model, precision, size), members in by_origin.items():
        for a, b in itertools.combinations(members, 2):
            if a["gpu"] != b["gpu"] and _close(a, b):
                first, second = sorted((a, b), key=lambda r: r["gpu"])
                ratios[(model, precision, size, first["gpu"], second["gpu"])].append(
                    (origin, first["per_gpu"] / second["per_gpu"])
                )
    pairs = []
    for key, measured in ratios.items():
        for (oa, ra), (ob, rb) in itertools.combinations(measured, 2):
            if oa != ob:
                pairs.append({"key": list(key), "a": oa, "b": ob,
                              "disagreement": abs(math.log(ra / rb))})  # fmt: skip
    return pairs


def summary(pairs: list[dict]) -> dict:
    logs = sorted(p["disagreement"] for p in pairs)
    if not logs:
        return {"pairs": 0}
    return {"pairs": len(logs), "median": math.exp(statistics.median(logs)) - 1,
            "p25": math.exp(logs[len(logs) // 4]) - 1, "p75": math.exp(logs[3 * len(logs) // 4]) - 1,
            "groups": len({tuple(p["key"]) for p in pairs})}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="benchmarks/results/source_agreement.json")
    args = parser.parse_args(argv)
    table = rows()
    absolute, ratio = absolute_pairs(table), ratio_pairs(table)
    result = {"benchmark": "source_agreement",
              "absolute": summary(absolute), "ratio": summary(ratio),
              "absolute_pairs": absolute, "ratio_pairs": ratio}  # fmt: skip
    for name in ("absolute", "ratio"):
        s = result[name]
        if s["pairs"]:
            print(
                f"{name}: {s['pairs']} pairs in {s['groups']} groups, median "
                f"{100 * s['median']:.1f}% (IQR {100 * s['p25']:.1f}-{100 * s['p75']:.1f}%)"
            )
        else:
            print(f"{name}: no pairs")
    write_report(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
