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

Where the spread comes from (``breakdown``): each form's operations as eager PyTorch
dispatches them (kind, count, bytes and time on the ``--breakdown-gpu`` at TF32, batch
``--batch``) and the per-op prediction from those uncanonicalised operations
(``per_op_as_dispatched_*``), beside the per-op model's own, which counts each operation as
what it is (perf/op_canon.py); ``spread_sources`` lists the (phase, operation) rows whose
time differs between the forms by more than 1% of the step.

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
from rightsize.perf.op_timing import OpEfficiencies, op_seconds, op_step_time
from rightsize.perf.precision import Precision

STYLES = ("torch", *gpu_models.ATTENTION_STYLES)


def catalog_gpus():
    text = resources.files("rightsize.core.catalog_data").joinpath("accelerators.csv").read_text()
    return [find_accelerator(row["name"]) for row in csv.DictReader(text.splitlines())]


def breakdown(sheet, param_bytes: float, acc, batch: int, eff: OpEfficiencies) -> dict:
    """One form's operations at ``batch`` on ``acc`` at TF32: (phase, name) -> kind, count,
    MB, ms."""
    out: dict[str, dict] = {}
    seconds = op_seconds(sheet, param_bytes, acc, Precision.TF32, batch, eff)
    for op, s in zip(sheet.ops, seconds, strict=True):
        row = out.setdefault(f"{op.phase} {op.name}", {"kind": op.kind.value, "count": 0,
                                                       "mb": 0.0, "ms": 0.0})  # fmt: skip
        row["count"] += op.count
        row["mb"] += op.count * op.bytes.at(batch) / 1e6
        row["ms"] += s * 1e3
    return out


def spread_sources(forms: dict[str, dict], step_ms: float) -> dict[str, dict[str, float]]:
    """The (phase, operation) rows whose time differs between the forms by > 1% of the step."""
    names = sorted(set().union(*forms.values()))
    rows = {n: {s: forms[s].get(n, {}).get("ms", 0.0) for s in forms} for n in names}
    return {n: v for n, v in rows.items() if max(v.values()) - min(v.values()) > 0.01 * step_ms}


def _spread(values) -> float:
    values = list(values)
    return max(values) / min(values) - 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="benchmarks/results/gpu_variants.json")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--breakdown-gpu", default="A100")
    args = parser.parse_args(argv)
    import torch

    sheets, ops, dispatched = {}, {}, {}
    for style in STYLES:
        print(f"counting {style}", file=sys.stderr)
        torch.manual_seed(0)
        built = gpu_models.bert(args.layers, 768, args.seq, style=style)
        sheets[style] = count_costs(built.model, built, 1)
        ops[style] = count_step_ops(built.model, built, "meta", 2)
        dispatched[style] = count_step_ops(built.model, built, "meta", 2, as_dispatched=True)
    per_class, per_op = Efficiencies.shipped(), OpEfficiencies.shipped()
    rows = []
    for acc in catalog_gpus():
        for precision in (Precision.PYTORCH, Precision.TF32, Precision.AMP):
            def speed(counted, s, acc=acc, precision=precision):
                return args.batch / op_step_time(counted[s], sheets[s].param_bytes, acc, precision,
                                                 args.batch, per_op).total_s  # fmt: skip

            old = {s: args.batch / step_time(sheets[s], acc, precision, args.batch,
                                             per_class).total_s for s in STYLES}  # fmt: skip
            new = {s: speed(ops, s) for s in STYLES}
            eager = {s: speed(dispatched, s) for s in STYLES}
            rows.append({"gpu": acc.name, "precision": precision.value,
                         "per_class_samples_per_s": old, "per_op_samples_per_s": new,
                         "per_op_as_dispatched_samples_per_s": eager,
                         "per_class_spread": _spread(old.values()),
                         "per_op_spread": _spread(new.values()),
                         "per_op_as_dispatched_spread": _spread(eager.values())})  # fmt: skip
    acc = find_accelerator(args.breakdown_gpu)
    forms = {s: breakdown(dispatched[s], sheets[s].param_bytes, acc, args.batch, per_op)
             for s in STYLES}  # fmt: skip
    step_ms = min(sum(r["ms"] for r in f.values()) for f in forms.values())
    result = {
        "benchmark": "gpu_variants",
        "model": f"BERT-base encoder, {args.layers} layers, {args.seq} tokens, "
                 f"batch {args.batch}",
        "styles": list(STYLES),
        "per_class_max_spread": max(r["per_class_spread"] for r in rows),
        "per_op_max_spread": max(r["per_op_spread"] for r in rows),
        "per_op_as_dispatched_max_spread": max(r["per_op_as_dispatched_spread"] for r in rows),
        "per_class_gflops_per_sample": {s: (sheets[s].layers and sum(
            c.forward_flops + c.backward_flops for c in sheets[s].layers) / 1e9) for s in STYLES},
        "per_op_gflops_per_sample": {s: ops[s].flops(1) / 1e9 for s in STYLES},
        "breakdown_gpu": f"{acc.name}, tf32, batch {args.batch}, shipped per-op efficiencies",
        "spread_sources": spread_sources(forms, step_ms),
        "breakdown": {"as_dispatched": forms,
                      "as_counted": {s: breakdown(ops[s], sheets[s].param_bytes, acc,
                                                  args.batch, per_op) for s in STYLES}},
        "rows": rows,
    }  # fmt: skip
    write_report(args.out, result)
    print(f"largest spread of the four: per-class {result['per_class_max_spread']:.1%}, "
          f"per-op {result['per_op_max_spread']:.1%} (as dispatched "
          f"{result['per_op_as_dispatched_max_spread']:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
