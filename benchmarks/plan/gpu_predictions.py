"""GPU predictions against published measurements of real training (issue 18, item 2).

Builds each measured model from the zoo on this CPU, counts its costs (no
timing: FLOPs with PyTorch's counter, bytes, operation classes), and predicts its
training throughput on each measured GPU with the calibrated device model
(src/rightsize/perf/device_model.py). It reports:

- the fit on every calibration row (benchmarks/data/measured/gpu_training_throughput.csv),
  and its errors held out: leave one GPU out, leave one model out — absolute and
  of the throughput ratio between two GPUs;
- the independent check on rows nobody fitted to (Lambda Labs' benchmarks,
  lambda_gpu_benchmarks.csv), predicted by the full fit;
- the same errors for the old absolute roofline (one fp32 peak, 35% of it),
  as the baseline.

``--write-efficiencies`` stores the full fit, its held-out errors and its
interval as the package's src/rightsize/perf/device_efficiencies.json.

    python benchmarks/plan/gpu_predictions.py --out benchmarks/results/gpu_predictions.json
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.plan import gpu_models
from rightsize.core.catalog import find_accelerator
from rightsize.core.errors import UnknownNameError
from rightsize.perf import calibration
from rightsize.perf.device_model import TENSOR_CLASSES, CostSheet, Efficiencies, LayerCost
from rightsize.perf.precision import OpClass, Precision

DATA = Path(__file__).resolve().parents[1] / "data" / "measured"
EFFICIENCIES = (Path(__file__).resolve().parents[2] / "src" / "rightsize" / "perf"
                / "device_efficiencies.json")  # fmt: skip
SHEETS = Path(__file__).resolve().parents[1] / "results" / "gpu_cost_sheets.json"
#: The old model as a baseline: every layer's max(compute, memory) at the fp32 peak, / 0.35.
OLD_ABSOLUTE = Efficiencies(
    cuda_core={c: 0.35 for c in TENSOR_CLASSES}, tensor_core={c: 0.35 for c in TENSOR_CLASSES},
    memory=0.35, kernel_s=5e-6, source="old absolute roofline",
)  # fmt: skip


#: Measured model names (as the data files spell them) -> (zoo model, its input size): the
#: same architecture. Models in gpu_models.BUILDERS are built there; rows of other models,
#: or at another input size, are skipped and counted as skipped.
ZOO = {
    "resnet50": ("resnet50", 224),
    "resnet50-v1.5": ("resnet50", 224),  # stride on the 3x3 instead of the 1x1: same FLOPs
    "resnet18": ("resnet18", 224),
    "resnet18-cifar": ("resnet18-cifar", 32),
    "densenet121": ("densenet121", 224),
    "mobilenetv2": ("mobilenetv2", 224),
    "vgg19": ("vgg19", 224),
}


def knows(model: str, size: str) -> bool:
    if model in ZOO:
        return size in ("", str(ZOO[model][1]))
    return model in gpu_models.BUILDERS


def cost_sheet(model: str, size: str, count_batch: int = 1) -> CostSheet:
    """Count one model's costs on this CPU (seconds to minutes; nothing is timed). At batch 1
    and 2: BERT-large at 512 tokens holds ~10 GB of activations at batch 4."""
    from rightsize.profiling.layers import layer_costs, trainable_layers
    from rightsize.profiling.memory import saved_activation_bytes
    from rightsize.workloads.registry import WorkloadRegistry

    if model in ZOO:
        feeder = WorkloadRegistry().get(ZOO[model][0])
        net = feeder.make_model(0, "cpu")
    else:
        feeder = gpu_models.BUILDERS[model](int(size) if size else None)
        net = feeder.model
    net.train()
    layers = trainable_layers(net)
    costs = layer_costs(net, feeder, layers, feeder.example_batch(count_batch))
    exclude = {p.untyped_storage().data_ptr() for p in net.parameters()}

    def saved(n: int) -> int:
        batch = feeder.example_batch(n)
        skip = exclude | {t.untyped_storage().data_ptr() for t in (*batch[0], batch[1])}
        return saved_activation_bytes(lambda: feeder.loss(net, batch), skip)

    activation = (saved(2 * count_batch) - saved(count_batch)) / count_batch
    sheet = [LayerCost(layer.op_class, c.forward_flops, c.backward_flops, c.output_bytes,
                       layer.param_bytes) for layer, c in zip(layers, costs.layers, strict=True)]  # fmt: skip
    return CostSheet.of_layers(sheet, costs.forward_flops, costs.backward_flops, activation)


def counted_apart(model: str, size: str) -> CostSheet:
    """:func:`cost_sheet` in a process of its own, so that each model's weights, gradients and
    activations (gigabytes for BERT-large) go back to the system when it is counted."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(cost_sheet, model, size).result()


def load_sheets(path: Path | None) -> dict[tuple[str, str], CostSheet]:
    """Counted sheets saved by an earlier run (counting is deterministic; BERT-large takes
    minutes on this CPU)."""
    if path is None or not path.is_file():
        return {}
    sheets = {}
    for entry in json.loads(path.read_text()):
        layers = tuple(LayerCost(OpClass(c["op_class"]), c["forward_flops"], c["backward_flops"],
                                 c["output_bytes"], c["param_bytes"]) for c in entry["layers"])  # fmt: skip
        sheets[entry["model"], entry["size"]] = CostSheet(layers, entry["param_bytes"])
    return sheets


def save_sheets(path: Path, sheets: dict[tuple[str, str], CostSheet]) -> None:
    path.write_text(json.dumps([
        {"model": model, "size": size, "param_bytes": sheet.param_bytes,
         "layers": [{"op_class": c.op_class.value, "forward_flops": c.forward_flops,
                     "backward_flops": c.backward_flops, "output_bytes": c.output_bytes,
                     "param_bytes": c.param_bytes} for c in sheet.layers]}
        for (model, size), sheet in sorted(sheets.items())
    ]) + "\n")  # fmt: skip


def read_rows(path: Path, sheets: dict[tuple[str, str], CostSheet], skipped: dict[str, int],
              frameworks: set[str] | None = None):  # fmt: skip
    """Measurements of ``path`` whose model and GPU rightsize knows (single-GPU rows)."""
    out = []
    with path.open() as handle:
        for row in csv.DictReader(handle):
            if int(row.get("num_gpus") or 1) != 1:
                continue
            model = row["model"]
            try:
                acc = find_accelerator(row["gpu"])
            except UnknownNameError:
                skipped[f"gpu {row['gpu']}"] = skipped.get(f"gpu {row['gpu']}", 0) + 1
                continue
            size = row["image_size_or_seq_len"]
            if not knows(model, size) or (frameworks and row["framework"] not in frameworks):
                skipped[f"model {model}"] = skipped.get(f"model {model}", 0) + 1
                continue
            if (model, size) not in sheets:
                print(f"counting {model} ({size or '-'})'s costs", file=sys.stderr)
                sheets[model, size] = counted_apart(model, size)
            out.append(calibration.Measurement(
                model, sheets[model, size], acc, Precision.parse(row["precision"]),
                int(row["per_gpu_batch"]), float(row["samples_per_s"]), row["source_id"],
            ))  # fmt: skip
    return out


def errors(measurements, eff: Efficiencies) -> dict:
    absolute = calibration.absolute_errors(measurements, eff)
    ratio = calibration.ratio_errors(measurements, eff)
    any_source = calibration.ratio_errors(measurements, eff, same_source=False)
    return {
        "n": len(absolute),
        "absolute_median": statistics.median(absolute) if absolute else None,
        "ratio_pairs": len(ratio),
        "ratio_median": statistics.median(ratio) if ratio else None,
        "ratio_any_source_pairs": len(any_source),
        "ratio_any_source_median": statistics.median(any_source) if any_source else None,
        "rows": [
            {"model": m.model, "gpu": m.accelerator.name, "precision": m.precision.value,
             "batch": m.batch, "measured": m.samples_per_s,
             "predicted": calibration.predicted_samples_per_s(m, eff), "source": m.source}
            for m in measurements
        ],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", default="benchmarks/results/gpu_predictions.json")
    parser.add_argument("--sheets", type=Path, default=SHEETS,
                        help="cache of counted cost sheets (read, then written back)")
    parser.add_argument("--frameworks", default="",
                        help="only rows of these frameworks, comma-separated (default all)")
    parser.add_argument("--write-efficiencies", action="store_true",
                        help=f"store the full fit as {EFFICIENCIES.name} in the package")
    args = parser.parse_args(argv)
    fit_file = args.data / "gpu_training_throughput.csv"
    check_file = args.data / "lambda_gpu_benchmarks.csv"
    if not fit_file.is_file():
        print(f"error: no calibration data at {fit_file}", file=sys.stderr)
        return 2
    sheets = load_sheets(args.sheets)
    skipped: dict[str, int] = {}
    frameworks = set(args.frameworks.split(",")) if args.frameworks else None
    fit_rows = read_rows(fit_file, sheets, skipped, frameworks)
    check_rows = read_rows(check_file, sheets, skipped, frameworks) if check_file.is_file() else []
    if args.sheets:
        save_sheets(args.sheets, sheets)
    print(f"{len(fit_rows)} calibration rows, {len(check_rows)} check rows", file=sys.stderr)
    full = calibration.fit(fit_rows, source=f"{fit_file.name}, {len(fit_rows)} rows")
    by_gpu = calibration.leave_one_out(fit_rows, "gpu")
    by_model = calibration.leave_one_out(fit_rows, "model")
    spread = calibration.log_spread(by_gpu)
    held = {"leave_one_gpu_out_ratio_median": by_gpu.summary()["ratio_median"],
            "leave_one_gpu_out_absolute_median": by_gpu.summary()["absolute_median"],
            "leave_one_model_out_ratio_median": by_model.summary()["ratio_median"],
            "leave_one_model_out_absolute_median": by_model.summary()["absolute_median"]}  # fmt: skip
    full = Efficiencies(full.cuda_core, full.tensor_core, full.memory, full.kernel_s,
                        spread or 0.0, full.source, held)  # fmt: skip
    result = {
        "benchmark": "gpu_predictions",
        "efficiencies": full.to_dict(),
        "fit": errors(fit_rows, full),
        "leave_one_gpu_out": by_gpu.summary(),
        "leave_one_model_out": by_model.summary(),
        "independent_check": errors(check_rows, full) if check_rows else None,
        "baseline_old_absolute": {
            "fit_rows": errors(fit_rows, OLD_ABSOLUTE),
            "check_rows": errors(check_rows, OLD_ABSOLUTE) if check_rows else None,
        },
        "skipped": skipped,
    }
    write_report(args.out, result)
    if args.write_efficiencies:
        EFFICIENCIES.write_text(json.dumps(full.to_dict(), indent=1) + "\n")
    for name in ("leave_one_gpu_out", "leave_one_model_out"):
        print(name, json.dumps(result[name]))
    if check_rows:
        check = result["independent_check"]
        print(f"independent check: absolute median {check['absolute_median']:.3f}, "
              f"ratio median {check['ratio_median']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
