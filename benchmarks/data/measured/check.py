"""Consistency check for the measured-throughput tables in this folder (stdlib only).

    python benchmarks/data/measured/check.py

Checks every CSV's columns, precision labels and positive numbers, keeps the
reserved sources (Lambda, CM-DARE) out of the calibration table, and compares
every GPU name with the ``name`` column of
src/rightsize/core/catalog_data/accelerators.csv.  GPU names that are not in the
catalogue are printed; they must be listed in README.md's "to add" table,
otherwise the check fails.  Exit status 0 means every check passed.
"""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CATALOG = ROOT / "src" / "rightsize" / "core" / "catalog_data" / "accelerators.csv"

THROUGHPUT_COLS = [
    "source_id",
    "model",
    "framework",
    "gpu",
    "num_gpus",
    "precision",
    "per_gpu_batch",
    "samples_per_s",
    "image_size_or_seq_len",
    "notes",
]
CMDARE_COLS = [
    "source_id",
    "model",
    "gpu",
    "num_ps",
    "num_workers",
    "per_worker_batch",
    "steps_per_s",
    "steps_per_s_std",
    "cluster_samples_per_s",
    "notes",
]
PRECISIONS = {"fp32", "tf32", "amp"}
RESERVED = {"lambda_v1", "lambda_v2", "cmdare_icdcs20", "cmdare_icdcs20_base"}

FILES = {
    "gpu_training_throughput.csv": (THROUGHPUT_COLS, None),
    "lambda_gpu_benchmarks.csv": (THROUGHPUT_COLS, {"lambda_v1", "lambda_v2"}),
    "cmdare_ps_cifar10.csv": (CMDARE_COLS, {"cmdare_icdcs20", "cmdare_icdcs20_base"}),
}

errors: list[str] = []


def fail(msg: str) -> None:
    errors.append(msg)


def positive(value: str, what: str, where: str, integer: bool = False) -> float:
    try:
        x = int(value) if integer else float(value)
    except ValueError:
        fail(f"{where}: {what} {value!r} is not {'an integer' if integer else 'a number'}")
        return 0.0
    if not x > 0:
        fail(f"{where}: {what} {value!r} is not positive")
    return x


def to_add_names(readme: Path) -> set[str]:
    """GPU names in the first column of README.md's 'to add' table."""
    names: set[str] = set()
    if not readme.exists():
        return names
    in_section = False
    for line in readme.read_text().splitlines():
        if line.startswith("#"):
            in_section = "to add" in line.lower()
            continue
        if in_section and line.startswith("|"):
            cell = line.strip("|").split("|")[0].strip().strip("`")
            if cell and not set(cell) <= set("-: ") and cell.lower() != "gpu":
                names.add(cell)
    return names


def main() -> int:
    catalog = {r["name"] for r in csv.DictReader(CATALOG.open())}
    gpus_seen: Counter[str] = Counter()
    for fname, (cols, allowed_sources) in FILES.items():
        path = HERE / fname
        if not path.exists():
            fail(f"{fname}: missing")
            continue
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != cols:
                fail(f"{fname}: columns {reader.fieldnames} != {cols}")
                continue
            rows = list(reader)
        if not rows:
            fail(f"{fname}: no rows")
        for i, r in enumerate(rows, start=2):
            where = f"{fname}:{i}"
            if any(v is None for v in r.values()) or None in r:
                fail(f"{where}: wrong number of fields")
                continue
            for c in ("source_id", "model", "gpu", "notes"):
                if not r[c].strip():
                    fail(f"{where}: empty {c}")
            src = r["source_id"]
            if allowed_sources is None:
                if src in RESERVED:
                    fail(f"{where}: reserved source {src} in the calibration table")
            elif src not in allowed_sources:
                fail(f"{where}: source {src} does not belong in {fname}")
            gpus_seen[r["gpu"]] += 1
            if cols is THROUGHPUT_COLS:
                if r["precision"] not in PRECISIONS:
                    fail(f"{where}: precision {r['precision']!r} not in {sorted(PRECISIONS)}")
                n = positive(r["num_gpus"], "num_gpus", where, integer=True)
                positive(r["per_gpu_batch"], "per_gpu_batch", where, integer=True)
                positive(r["samples_per_s"], "samples_per_s", where)
                if r["image_size_or_seq_len"]:
                    positive(
                        r["image_size_or_seq_len"], "image_size_or_seq_len", where, integer=True
                    )
                if n and n > 1 and "MULTI-GPU" not in r["notes"]:
                    fail(f"{where}: multi-GPU row without a MULTI-GPU label in notes")
                if r["precision"] == "tf32" and r["gpu"] in {
                    "K80",
                    "P100",
                    "P100-SXM2",
                    "V100",
                    "V100-32GB",
                    "T4",
                }:
                    fail(f"{where}: tf32 on a GPU without TF32 ({r['gpu']})")
            else:
                positive(r["num_ps"], "num_ps", where, integer=True)
                positive(r["num_workers"], "num_workers", where, integer=True)
                bs = positive(r["per_worker_batch"], "per_worker_batch", where, integer=True)
                sps = positive(r["steps_per_s"], "steps_per_s", where)
                tot = positive(r["cluster_samples_per_s"], "cluster_samples_per_s", where)
                if r["steps_per_s_std"]:
                    float(r["steps_per_s_std"])
                if sps and bs and tot and abs(tot - sps * bs) > 0.01 * tot:
                    fail(
                        f"{where}: cluster_samples_per_s {tot} != steps_per_s x batch {sps * bs:.1f}"
                    )
        print(f"{fname}: {len(rows)} rows, sources {dict(Counter(r['source_id'] for r in rows))}")

    missing = sorted(g for g in gpus_seen if g not in catalog)
    listed = to_add_names(HERE / "README.md")
    if missing:
        print("GPU names not in accelerators.csv (rows):")
        for g in missing:
            mark = "listed as 'to add' in README.md" if g in listed else "NOT LISTED in README.md"
            print(f"  {g} ({gpus_seen[g]}): {mark}")
            if g not in listed:
                fail(f"GPU {g} is neither in accelerators.csv nor in README.md's 'to add' table")
    for e in errors:
        print("ERROR", e)
    print("OK" if not errors else f"{len(errors)} error(s)")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
