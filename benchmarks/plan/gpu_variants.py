"""One BERT-base written four ways, predicted on every catalog GPU by both device models (issue 40).

The same network — 12 layers of 768, 12 heads, 128 tokens, BERT's dropout — built as
PyTorch's ``nn.TransformerEncoder`` (``torch``), as BertSelfAttention writes it
(``explicit``: separate Q/K/V projections, matmul, scaling, mask, softmax), with
``einsum``, and with ``F.scaled_dot_product_attention`` behind a fused QKV
projection (``sdpa``; benchmarks/plan/gpu_models.py). Each is counted on this CPU
as ``plan`` counts a profile: module types and FLOPs for the ``per-class`` model,
the dispatched operations (on meta tensors) for the ``per-op`` one; each is
predicted with the shipped calibrations at batch 32 in every precision on every
catalog GPU. Reported: the spread (slowest / fastest − 1) of the four predictions,
per GPU and precision, and its maximum, for both models.

    python benchmarks/plan/gpu_variants.py --out benchmarks/results/gpu_variants.json
"""

from __future__ import annotations

import argparse
import csv
import sys
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.plan import gpu_models
from benchmarks.plan.gpu_predictions import count_costs, count_step_ops
from rightsize.core.catalog import find_accelerator
from rightsize.perf.device_model import Efficiencies, step_time
from rightsize.perf.op_timing import OpEfficiencies, op_step_time
from rightsize.perf.precision import Precision

STYLES = ("torch", *gpu_models.ATTENTION_STYLES)


def catalog_gpus():
    text = resources.files("rightsize.core.catalog_data").joinpath("accelerators.csv").read_text()
    return [find_accelerator(row["name"]) for row in csv.DictReader(text.splitlines())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/gpu_variants.json")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args(argv)
    import torch

    sheets, ops = {}, {}
    for style in STYLES:
        print(f"counting {style}", file=sys.stderr)
        torch.manual_seed(0)
        built = gpu_models.bert(args.layers, 768, args.seq, style=style)
        sheets[style] = count_costs(built.model, built, 1)
        ops[style] = count_step_ops(built.model, built, "meta", 2)
    per_class, per_op = Efficiencies.shipped(), OpEfficiencies.shipped()
    rows = []
    for acc in catalog_gpus():
        for precision in (Precision.PYTORCH, Precision.TF32, Precision.AMP):
            old = {s: args.batch / step_time(sheets[s], acc, precision, args.batch,
                                             per_class).total_s for s in STYLES}  # fmt: skip
            new = {s: args.batch / op_step_time(ops[s], sheets[s].param_bytes, acc, precision,
                                                args.batch, per_op).total_s for s in STYLES}  # fmt: skip
            rows.append({"gpu": acc.name, "precision": precision.value,
                         "per_class_samples_per_s": old, "per_op_samples_per_s": new,
                         "per_class_spread": max(old.values()) / min(old.values()) - 1,
                         "per_op_spread": max(new.values()) / min(new.values()) - 1})  # fmt: skip
    result = {
        "benchmark": "gpu_variants",
        "model": f"BERT-base encoder, {args.layers} layers, {args.seq} tokens, "
                 f"batch {args.batch}",
        "styles": list(STYLES),
        "per_class_max_spread": max(r["per_class_spread"] for r in rows),
        "per_op_max_spread": max(r["per_op_spread"] for r in rows),
        "per_class_gflops_per_sample": {s: (sheets[s].layers and sum(
            c.forward_flops + c.backward_flops for c in sheets[s].layers) / 1e9) for s in STYLES},
        "per_op_gflops_per_sample": {s: ops[s].flops(1) / 1e9 for s in STYLES},
        "rows": rows,
    }  # fmt: skip
    write_report(args.out, result)
    print(f"largest spread of the four: per-class {result['per_class_max_spread']:.1%}, "
          f"per-op {result['per_op_max_spread']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
