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
  as the baseline;
- both device models side by side (issue 40): ``per-class`` (one efficiency per
  operation class, perf/device_model.py) and ``per-op`` (each dispatched operation
  by its shape, perf/op_costs.py and perf/op_timing.py, counted on meta tensors),
  each fitted and held out the same way; ratio errors over GPU pairs of one source,
  both at the same batch and as a user compares GPUs (each at the batch its source
  ran), median and 90th percentile.

``--attention-timing fused`` times attention as one fused kernel (no score-matrix traffic)
instead of as the published implementations ran it, to measure that choice
(perf/op_timing.py's ``FUSED_ATTENTION_COSTS``; don't ship that fit).

``--write-efficiencies`` stores the full per-class fit, its held-out errors and its
interval as the package's src/rightsize/perf/device_efficiencies.json;
``--write-op-efficiencies`` the per-op fit as op_efficiencies.json.

    python benchmarks/plan/gpu_predictions.py --out benchmarks/results/gpu_predictions.json
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.plan import gpu_models
from rightsize.core.catalog import find_accelerator
from rightsize.core.errors import UnknownNameError
from rightsize.perf import calibration, op_calibration
from rightsize.perf.device_model import TENSOR_CLASSES, CostSheet, Efficiencies, LayerCost
from rightsize.perf.op_sheet import OpSheet
from rightsize.perf.precision import OpClass, Precision

DATA = Path(__file__).resolve().parents[1] / "data" / "measured"
EFFICIENCIES = (Path(__file__).resolve().parents[2] / "src" / "rightsize" / "perf"
                / "device_efficiencies.json")  # fmt: skip
SHEETS = Path(__file__).resolve().parents[1] / "results" / "gpu_cost_sheets.json"
OP_SHEETS = Path(__file__).resolve().parents[1] / "results" / "gpu_op_sheets.json"
OP_EFFICIENCIES = EFFICIENCIES.with_name("op_efficiencies.json")
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


#: Sources measured with NVIDIA's reference implementations, as opposed to networks written
#: as users write them (Gavel, Pollux, tf_cnn_benchmarks, single-author scripts): NVIDIA's
#: DeepLearningExamples (``dle_*``) and Lambda's benchmark, which runs those examples' scripts
#: in NGC containers (benchmarks/data/measured/README.md). Both device models fit how much
#: faster these train (``reference_speedup``, perf/fitted.py) and predict users' code.
REFERENCE_SOURCE_PREFIXES = ("dle_", "lambda_")


def is_reference(source: str) -> bool:
    return source.startswith(REFERENCE_SOURCE_PREFIXES)


def knows(model: str, size: str) -> bool:
    if model in ZOO:
        return size in ("", str(ZOO[model][1]))
    return model in gpu_models.BUILDERS


def cost_sheet(model: str, size: str, count_batch: int = 1) -> CostSheet:
    """Count one model's costs on this CPU (seconds to minutes; nothing is timed). At batch 1
    and 2: BERT-large at 512 tokens holds ~10 GB of activations at batch 4."""
    return count_costs(*_built(model, size), count_batch)


def count_costs(net, feeder, count_batch: int = 1) -> CostSheet:
    """:func:`cost_sheet` of a built network and what feeds it."""
    from rightsize.profiling.layers import layer_costs, trainable_layers
    from rightsize.profiling.memory import saved_activation_bytes

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


def _built(model: str, size: str):
    """(the network, what feeds it): the zoo's or gpu_models'."""
    from rightsize.workloads.registry import WorkloadRegistry

    if model in ZOO:
        feeder = WorkloadRegistry().get(ZOO[model][0])
        return feeder.make_model(0, "cpu"), feeder
    feeder = gpu_models.BUILDERS[model](int(size) if size else None)
    return feeder.model, feeder


def op_sheet(model: str, size: str, count_batch: int = 2) -> OpSheet | None:
    """Count the operations one step dispatches (perf/op_costs.py) at ``count_batch`` and
    twice it — on meta tensors (shapes only: BERT-large at 512 tokens in seconds), or on this
    CPU for recurrent layers and where an operation has no meta kernel. None where the graph
    changes with the batch."""
    from torch import nn

    net, feeder = _built(model, size)
    # recurrent layers: the CPU runs them fused, as cuDNN does; meta tensors decompose them
    recurrent = any(isinstance(m, nn.RNNBase) for m in net.modules())
    for device in ("cpu",) if recurrent else ("meta", "cpu"):
        try:
            return count_step_ops(net, feeder, device, count_batch)
        except (NotImplementedError, RuntimeError) as exc:
            print(f"{model}: counting on {device} failed ({str(exc)[:80]})", file=sys.stderr)
            net = _built(model, size)[0]  # meta weights cannot go back to the CPU
        except ValueError:
            return None
    return None


def count_step_ops(net, feeder, device: str = "meta", count_batch: int = 2,
                   as_dispatched: bool = False) -> OpSheet:  # fmt: skip
    """:func:`op_sheet` of a built network on ``device``.

    Raises:
        ValueError: the graph changes with the batch; NotImplementedError, RuntimeError: an
            operation without a kernel on ``device``.
    """
    from rightsize.perf.op_costs import count_ops

    net.train().to(device)

    def step_at(n: int):
        inputs, target = feeder.example_batch(n)
        batch = (tuple(t.to(device) for t in inputs), target.to(device))
        return lambda: feeder.loss(net, batch)

    return count_ops(net, step_at, count_batch, as_dispatched)


def op_sheet_apart(model: str, size: str) -> OpSheet | None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(op_sheet, model, size).result()


def load_op_sheets(path: Path | None) -> dict[tuple[str, str], OpSheet | None]:
    if path is None or not path.is_file():
        return {}
    return {(e["model"], e["size"]): None if e["ops"] is None else OpSheet.from_list(e["ops"])
            for e in json.loads(path.read_text())}  # fmt: skip


def save_op_sheets(path: Path, sheets: dict[tuple[str, str], OpSheet | None]) -> None:
    path.write_text(json.dumps([
        {"model": model, "size": size, "ops": None if sheet is None else sheet.to_list()}
        for (model, size), sheet in sorted(sheets.items())
    ]) + "\n")  # fmt: skip


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
              frameworks: set[str] | None = None,
              op_sheets: dict[tuple[str, str], OpSheet | None] | None = None):  # fmt: skip
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
            if op_sheets is not None and (model, size) not in op_sheets:
                print(f"counting {model} ({size or '-'})'s operations", file=sys.stderr)
                op_sheets[model, size] = op_sheet_apart(model, size)
            out.append(calibration.Measurement(
                model, sheets[model, size], acc, Precision.parse(row["precision"]),
                int(row["per_gpu_batch"]), float(row["samples_per_s"]), row["source_id"],
                (op_sheets or {}).get((model, size)), is_reference(row["source_id"]),
            ))  # fmt: skip
    return out


def ablated(m: calibration.Measurement, args) -> calibration.Measurement:
    """``m`` without what the ablation flags take away."""
    if args.no_reference_stack:
        m = dataclasses.replace(m, reference=False)
    if args.no_issue_fraction:
        m = dataclasses.replace(m, accelerator=dataclasses.replace(m.accelerator,
                                                                   issue_fraction=None))
    return m


def errors(measurements, eff, predict=calibration.predicted_samples_per_s) -> dict:
    absolute = calibration.absolute_errors(measurements, eff, predict)
    ratio = calibration.ratio_errors(measurements, eff, predict=predict)
    own = calibration.ratio_errors(measurements, eff, predict=predict, same_batch=False)
    any_source = calibration.ratio_errors(measurements, eff, same_source=False, predict=predict)
    return {
        "n": len(absolute),
        "absolute_median": statistics.median(absolute) if absolute else None,
        "absolute_p90": calibration._quantile(absolute, 0.9),
        "ratio_pairs": len(ratio),
        "ratio_median": statistics.median(ratio) if ratio else None,
        "ratio_p90": calibration._quantile(ratio, 0.9),
        "ratio_own_batch_pairs": len(own),
        "ratio_own_batch_median": statistics.median(own) if own else None,
        "ratio_own_batch_p90": calibration._quantile(own, 0.9),
        "ratio_any_source_pairs": len(any_source),
        "ratio_any_source_median": statistics.median(any_source) if any_source else None,
        "rows": [
            {"model": m.model, "gpu": m.accelerator.name, "precision": m.precision.value,
             "batch": m.batch, "measured": m.samples_per_s,
             "predicted": predict(m, eff), "source": m.source}
            for m in measurements
        ],
    }  # fmt: skip


def _held_out_summary(by_gpu, by_model) -> dict:
    gpu, model = by_gpu.summary(), by_model.summary()
    return {f"leave_one_{name}_out_{key}": summary[key]
            for name, summary in (("gpu", gpu), ("model", model))
            for key in ("ratio_median", "ratio_p90", "ratio_own_batch_median",
                        "ratio_own_batch_p90", "absolute_median", "absolute_p90")}  # fmt: skip


#: How many of the worst held-out pairs the result lists (issue 40 item 2: what keeps p90 up).
WORST_PAIRS = 15
GROUP_OF = {"gpu": lambda m: m.accelerator.name, "model": lambda m: m.model}


def remembering(rows, by: str, fitter, fits: dict):
    """``fitter`` for calibration.leave_one_out that keeps each fit under the group it held
    out, so that the held-out pairs can be named afterwards without fitting again."""
    group_of = GROUP_OF[by]
    groups = {group_of(m) for m in rows}

    def fit(seen):
        (held,) = groups - {group_of(m) for m in seen}
        fits[held] = eff = fitter(seen)
        return eff

    return fit


def held_out_pairs(rows, by: str, fits: dict, predict) -> list[dict]:
    """Every held-out GPU pair as a user compares GPUs (one source, same model and precision,
    each GPU at its source's batch), predicted by the fit that held its group out — the
    pairs behind calibration.leave_one_out's ``ratio_own_batch`` errors, named."""
    group_of = GROUP_OF[by]
    pairs = []
    for group, eff in sorted(fits.items()):
        for a, b in calibration._gpu_pairs(rows, same_source=True, same_batch=False):
            if group not in (group_of(a), group_of(b)):
                continue
            measured, predicted = a.samples_per_s / b.samples_per_s, predict(a, eff) / predict(b, eff)
            pairs.append({"held_out": group, "model": a.model, "source": a.source,
                          "precision": a.precision.value,
                          "gpus": [a.accelerator.name, b.accelerator.name],
                          "batches": [a.batch, b.batch], "measured_ratio": measured,
                          "predicted_ratio": predicted, "error": abs(predicted / measured - 1)})  # fmt: skip
    return sorted(pairs, key=lambda p: -p["error"])


def pair_errors_by(pairs: list[dict]) -> dict:
    """Median and 90th percentile of the pairs' errors by GPU (either side), precision and
    model, and of the pairs without each GPU: which of them carries the tail."""
    keys = {"gpu": lambda p: p["gpus"], "precision": lambda p: [p["precision"]],
            "model": lambda p: [p["model"]]}  # fmt: skip
    out = {}
    for name, key in keys.items():
        groups: dict[str, list[float]] = {}
        for pair in pairs:
            for value in set(key(pair)):
                groups.setdefault(value, []).append(pair["error"])
        out[name] = {value: {"pairs": len(errors), "median": statistics.median(errors),
                             "p90": calibration._quantile(errors, 0.9)}
                     for value, errors in sorted(groups.items())}  # fmt: skip
    # the tail without each GPU: what p90 would be if that GPU's pairs were not there
    out["without_gpu"] = {}
    for gpu in sorted(out["gpu"]):
        rest = [p["error"] for p in pairs if gpu not in p["gpus"]]
        out["without_gpu"][gpu] = {"pairs": len(rest), "median": statistics.median(rest),
                                   "p90": calibration._quantile(rest, 0.9)}  # fmt: skip
    return out


def evaluate(method: str, fit_rows, check_rows, fitter, predict, fit_source: str) -> dict:
    """One device model fitted on every calibration row, held out by GPU and by model, and
    checked on the reserved rows."""
    full = fitter(fit_rows, source=fit_source)
    fits: dict[str, dict] = {"gpu": {}, "model": {}}
    by_gpu = calibration.leave_one_out(
        fit_rows, "gpu", remembering(fit_rows, "gpu", fitter, fits["gpu"]), predict)
    by_model = calibration.leave_one_out(
        fit_rows, "model", remembering(fit_rows, "model", fitter, fits["model"]), predict)
    pairs = {by: held_out_pairs(fit_rows, by, fits[by], predict) for by in fits}
    by_source = calibration.leave_one_out(fit_rows, "source", fitter, predict)
    users = [e for e, source in zip(by_source.absolute, by_source.groups, strict=True)
             if not is_reference(source)]  # fmt: skip
    return {
        # each publisher's rows predicted by a fit that saw none of them: a new source's stack,
        # and for users' own code (not NVIDIA's reference implementations) what a user meets
        "leave_one_source_out": {**by_source.summary(),
                                 "users_code_rows": len(users),
                                 "users_code_absolute_median": statistics.median(users),
                                 "users_code_absolute_p90": calibration._quantile(users, 0.9)},
        "worst_held_out_pairs": {by: pairs[by][:WORST_PAIRS] for by in pairs},
        "held_out_pair_errors_by": {by: pair_errors_by(pairs[by]) for by in pairs},
        "method": method,
        "full": full,
        "log_spread": calibration.log_spread(by_gpu) or 0.0,
        "held_out": _held_out_summary(by_gpu, by_model),
        "fit": errors(fit_rows, full, predict),
        "leave_one_gpu_out": by_gpu.summary(),
        "leave_one_model_out": by_model.summary(),
        "independent_check": errors(check_rows, full, predict) if check_rows else None,
    }


def _score(result: dict) -> float:
    """What 'better held out' means here: the mean of the held-out medians (ratio at one
    batch, ratio as a user compares, absolute), by GPU and by model."""
    held = result["held_out"]
    keys = [k for k in held if k.endswith("_median") and held[k] is not None]
    return sum(held[k] for k in keys) / len(keys)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", default="benchmarks/results/gpu_predictions.json")
    parser.add_argument("--sheets", type=Path, default=SHEETS,
                        help="cache of counted cost sheets (read, then written back)")
    parser.add_argument("--op-sheets", type=Path, default=OP_SHEETS,
                        help="cache of counted operations (read, then written back)")
    parser.add_argument("--frameworks", default="",
                        help="only rows of these frameworks, comma-separated (default all)")
    parser.add_argument("--exclude-models", default="",
                        help="leave these measured models out of both fits, comma-separated")
    parser.add_argument("--no-reference-stack", action="store_true",
                        help="fit every row as users' own code (no reference_speedup): ablation")
    parser.add_argument("--no-issue-fraction", action="store_true",
                        help="every GPU at its datasheet FP32 peak (Kepler's single issue "
                        "ignored): ablation")
    parser.add_argument("--attention-timing", choices=("unfused", "fused"), default="unfused",
                        help="per-op attention as the published stacks ran it, or fused")
    parser.add_argument("--write-efficiencies", action="store_true",
                        help=f"store the full per-class fit as {EFFICIENCIES.name} in the package")
    parser.add_argument("--write-op-efficiencies", action="store_true",
                        help=f"store the full per-op fit as {OP_EFFICIENCIES.name}")
    args = parser.parse_args(argv)
    ablation = args.attention_timing == "fused" or args.no_reference_stack or args.no_issue_fraction
    if ablation and (args.write_op_efficiencies or args.write_efficiencies):
        parser.error("--attention-timing fused, --no-reference-stack and --no-issue-fraction "
                     "are measurements; they are not shipped")
    if args.attention_timing == "fused":
        from unittest import mock

        from rightsize.perf import op_timing

        with mock.patch.dict(op_timing.ATTENTION_COSTS, op_timing.FUSED_ATTENTION_COSTS):
            return _run(args)
    return _run(args)


def _run(args) -> int:
    fit_file = args.data / "gpu_training_throughput.csv"
    check_file = args.data / "lambda_gpu_benchmarks.csv"
    if not fit_file.is_file():
        print(f"error: no calibration data at {fit_file}", file=sys.stderr)
        return 2
    sheets = load_sheets(args.sheets)
    op_sheets = load_op_sheets(args.op_sheets)
    skipped: dict[str, int] = {}
    frameworks = set(args.frameworks.split(",")) if args.frameworks else None
    fit_rows = read_rows(fit_file, sheets, skipped, frameworks, op_sheets)
    check_rows = (read_rows(check_file, sheets, skipped, frameworks, op_sheets)
                  if check_file.is_file() else [])  # fmt: skip
    if args.sheets:
        save_sheets(args.sheets, sheets)
    if args.op_sheets:
        save_op_sheets(args.op_sheets, op_sheets)
    # both models on the same rows: those whose operations could be counted
    uncounted = sorted({m.model for m in fit_rows + check_rows if m.ops is None})
    excluded = set(filter(None, args.exclude_models.split(",")))
    fit_rows = [ablated(m, args) for m in fit_rows if m.ops is not None and m.model not in excluded]
    check_rows = [ablated(m, args) for m in check_rows
                  if m.ops is not None and m.model not in excluded]  # fmt: skip
    print(f"{len(fit_rows)} calibration rows, {len(check_rows)} check rows"
          f"{'; without counted operations: ' + ', '.join(uncounted) if uncounted else ''}",
          file=sys.stderr)  # fmt: skip
    source = f"{fit_file.name}, {len(fit_rows)} rows"
    per_class = evaluate("per-class", fit_rows, check_rows,
                         lambda rows, source="": calibration.fit(rows, source=source),
                         calibration.predicted_samples_per_s, source)  # fmt: skip
    per_op = evaluate("per-op", fit_rows, check_rows,
                      lambda rows, source="": op_calibration.fit(rows, source=source),
                      op_calibration.predicted_samples_per_s, source)  # fmt: skip
    full = dataclasses.replace(per_class["full"], log_spread=per_class["log_spread"],
                               held_out=per_class["held_out"])  # fmt: skip
    # every fitted field kept (the traffic fraction was dropped here before 2026-11-29)
    op_full = dataclasses.replace(per_op["full"], log_spread=per_op["log_spread"],
                                  held_out=per_op["held_out"])  # fmt: skip
    better = "per-op" if _score(per_op) < _score(per_class) else "per-class"
    result = {
        "benchmark": "gpu_predictions",
        "efficiencies": full.to_dict(),
        "op_efficiencies": op_full.to_dict(),
        "better_held_out": better,
        "held_out_side_by_side": {"per-class": per_class["held_out"],
                                  "per-op": per_op["held_out"]},  # fmt: skip
        **{f"{key}": per_class[key] for key in ("fit", "leave_one_gpu_out",
                                                "leave_one_model_out", "leave_one_source_out",
                                                "independent_check",
                                                "worst_held_out_pairs",
                                                "held_out_pair_errors_by")},
        "per_op": {key: per_op[key] for key in ("fit", "leave_one_gpu_out",
                                                "leave_one_model_out", "leave_one_source_out",
                                                "independent_check",
                                                "worst_held_out_pairs",
                                                "held_out_pair_errors_by")},
        # what `plan` predicts today by default: the per-class file the package ships, which
        # the fit above replaces only with --write-efficiencies
        "shipped_per_class": {
            "source": Efficiencies.shipped().source,
            "fit_rows": errors(fit_rows, Efficiencies.shipped()),
            "check_rows": errors(check_rows, Efficiencies.shipped()) if check_rows else None,
        },
        "baseline_old_absolute": {
            "fit_rows": errors(fit_rows, OLD_ABSOLUTE),
            "check_rows": errors(check_rows, OLD_ABSOLUTE) if check_rows else None,
        },
        "attention_timing": args.attention_timing,
        "reference_stack": not args.no_reference_stack,
        "issue_fraction": not args.no_issue_fraction,
        "uncounted_models": uncounted,
        "excluded_models": sorted(excluded),
        "skipped": skipped,
    }  # fmt: skip
    write_report(args.out, result)
    if args.write_efficiencies:
        EFFICIENCIES.write_text(json.dumps(full.to_dict(), indent=1) + "\n")
    if args.write_op_efficiencies:
        OP_EFFICIENCIES.write_text(json.dumps(op_full.to_dict(), indent=1) + "\n")
    for name, res in (("per-class", per_class), ("per-op", per_op)):
        print(name, json.dumps(res["held_out"]))
        source = res["leave_one_source_out"]
        print(f"  held out by source: absolute median {source['absolute_median']:.3f}, "
              f"users' code {source['users_code_absolute_median']:.3f}")  # fmt: skip
        check = res["independent_check"]
        if check:
            print(f"  independent check: absolute median {check['absolute_median']:.3f}, "
                  f"ratio median {check['ratio_median']}, "
                  f"own-batch ratio median {check['ratio_own_batch_median']}")  # fmt: skip
    print(f"better held out: {better}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
