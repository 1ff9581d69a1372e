"""The GPU check (issue 40 item 7): what only a GPU can tell, in one command, in minutes.

Run it whenever a GPU is at hand (``device`` in the tool library: about one session in five)
and record what it prints in docs/benchmarks.md. On the GPU it:

1. profiles two zoo models there (``rightsize profile MODEL --device cuda``: the CUDA path of
   the profiler, which no CPU run exercises), each within ``--profile-budget-s``;
2. times real training steps of each model at three batches and three precisions (fp32,
   TF32, AMP; SGD with momentum, synthetic data on the device, as the device model
   assumes) and prints them beside what the device model predicts for that GPU from the
   profile (``plan``'s default, the per-operation model): predicted / measured per row,
   and the median absolute error;
3. trains one packed Hyperband rung — ``--trials`` trials of the packing paper's MLP-3 with
   different batch sizes and optimizers, ``--rung-steps`` steps each — one trial after
   another and then packed (``rightsize.packing``), and prints the speed-up (the paper
   reports 2.7x for packed Hyperband on a GPU) and how far apart each trial's losses are.

The GPU is matched to the catalog by its name (``--catalog-gpu`` to name it), so that the
prediction uses that GPU's datasheet. ``--device cpu --quick`` runs the same code on a CPU
with small models, batches and budgets (what the test suite runs; its numbers mean nothing).

    python benchmarks/gpu_check.py --out benchmarks/results/gpu_check.json
    python benchmarks/gpu_check.py --device cpu --quick --catalog-gpu T4 --out /tmp/gpu_check.json
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from rightsize.cli.args import bounded
from rightsize.core.catalog import Accelerator, builtin_accelerators, find_accelerator
from rightsize.core.errors import UnknownNameError
from rightsize.core.limits import COUNT, POSITIVE
from rightsize.packing.alone import train_alone
from rightsize.packing.data import DataStream
from rightsize.packing.optimizers import OPTIMIZER_KINDS, OptimizerSpec
from rightsize.packing.pack import load, pack, train
from rightsize.packing.trial import Architectures, TrialSpec, TrialState
from rightsize.perf.device_model import GpuCompute
from rightsize.perf.precision import Precision
from rightsize.profiling.profile import Profile
from rightsize.workloads.registry import WorkloadRegistry


@dataclass(frozen=True)
class Case:
    """One model the check profiles and times, and the per-device batches it times."""

    model: str
    dataset: str
    batches: tuple[int, ...]


#: ResNet-50 (convolutions) and the zoo's transformer (matmuls and attention), at batches
#: from a partly filled GPU to a full one.
CASES = (Case("resnet50", "synthetic-imagenet", (32, 64, 128)),
         Case("gpt-small", "synthetic-text", (16, 64, 256)))  # fmt: skip
#: --quick: small models and batches, so that a CPU runs the whole check in about a minute.
QUICK_CASES = (Case("small-cnn", "synthetic-cifar", (2, 4, 8)),
               Case("gpt-small", "synthetic-text", (2, 4, 8)))  # fmt: skip
PRECISIONS = (Precision.FP32, Precision.TF32, Precision.AMP)
MOMENTUM = 0.9  # the device model times SGD with momentum's update


def catalog_gpu(device_name: str) -> Accelerator:
    """The catalog accelerator a CUDA device name names: the one whose name's every part
    (split at ``-``) is a word of it, the most parts winning — "NVIDIA A100-SXM4-80GB" is
    the A100-80GB, "Tesla V100-SXM2-16GB" the V100, "NVIDIA H200" the H200.

    Raises:
        UnknownNameError: no catalog accelerator matches.
    """
    words = set(device_name.upper().replace("-", " ").split())
    matches = [a for a in builtin_accelerators()
               if all(part in words for part in a.name.upper().split("-"))]  # fmt: skip
    if not matches:
        raise UnknownNameError(f"no catalog accelerator matches the device {device_name!r}: "
                               "name one with --catalog-gpu")  # fmt: skip
    return max(matches, key=lambda a: (len(a.name.split("-")), len(a.name)))


def profile_on(case: Case, device: str, budget_s: float, quick: bool, folder: Path) -> dict:
    """``rightsize profile`` of ``case`` on ``device`` in a process of its own (its memory goes
    back when it ends): the profile's path, its wall time and its warnings."""
    out = folder / f"{case.model}-{device.replace(':', '')}.json"
    argv = [sys.executable, "-m", "rightsize", "profile", case.model, "--dataset", case.dataset,
            "--device", device, "--budget-s", str(budget_s), "--out", str(out), "--quiet"]  # fmt: skip
    if quick:
        argv += ["--max-batch", str(max(case.batches)), "--repeats", "1", "--warmup", "1"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:  # said in the report; the steps are still timed
        return {"path": None, "wall_s": wall, "error": done.stderr.strip()[-2000:]}
    return {"path": str(out), "wall_s": wall, "warnings": Profile.load(out).timing_warnings()}


def predicted_samples_per_s(profile: Profile, acc: Accelerator, precision: Precision,
                            batch: int) -> tuple[float, str]:  # fmt: skip
    """What ``plan`` predicts for ``batch`` on ``acc`` (its default device model), and which
    model ran (per-op where the profile recorded its operations)."""
    compute = GpuCompute.of(profile, acc, precision)
    return batch / compute.step(batch).total_s, compute.method.value


def _precision_flags(precision: Precision) -> None:
    """TF32 on (both matmuls and convolutions) only for ``tf32``: fp32 means fp32 throughout."""
    tf32 = precision is Precision.TF32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32


def measured_samples_per_s(case: Case, device: torch.device, precision: Precision, batch: int,
                           warmup: int, steps: int, rounds: int) -> float | None:  # fmt: skip
    """Real training steps of ``case`` at ``batch`` and ``precision`` on ``device``: the median
    over ``rounds`` of ``steps`` steps' samples per second (None where the batch does not fit)."""
    workload = WorkloadRegistry().get(case.model, case.dataset)
    _precision_flags(precision)
    amp = precision is Precision.AMP
    half = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.amp.GradScaler(device.type, enabled=amp and device.type == "cuda")
    try:
        model = workload.make_model(0, device).train()
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=MOMENTUM)
        data = workload.example_batch(batch, device)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=half, enabled=amp):
                loss = workload.loss(model, data)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        for _ in range(warmup):
            step()
        rates = []
        for _ in range(rounds):
            _synchronize(device)
            start = time.perf_counter()
            for _ in range(steps):
                step()
            _synchronize(device)
            rates.append(batch * steps / (time.perf_counter() - start))
        return statistics.median(rates)
    except torch.cuda.OutOfMemoryError:
        return None
    finally:
        _precision_flags(Precision.FP32)
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def packed_rung(device: torch.device, trials: int, steps: int) -> dict:
    """One Hyperband rung of ``trials`` MLP-3 trials (batch sizes 20-70 and four optimizers,
    as the packing paper's Table 3 draws them), ``steps`` steps each: alone one after another
    (``torch.optim`` as users run it), then packed; wall times and how far apart the losses are."""
    registry = WorkloadRegistry()
    architectures = Architectures(lambda extra: registry.get("mlp3", "digits", dict(extra)))
    specs = [TrialSpec(f"t{i}", 20 + (50 * i) // max(1, trials - 1),
                       OptimizerSpec(OPTIMIZER_KINDS[i % len(OPTIMIZER_KINDS)], 1e-3), (), seed=i)
             for i in range(trials)]  # fmt: skip
    stream = DataStream(architectures.workload(()).dataset, 70, 0, device)
    _synchronize(device)
    start = time.perf_counter()
    alone = {s.trial_id: train_alone(TrialState(s), architectures, stream, steps, device)
             for s in specs}  # fmt: skip
    _synchronize(device)
    alone_s = time.perf_counter() - start
    start = time.perf_counter()
    packed = train(pack([load(TrialState(s), architectures, device) for s in specs], stream),
                   {s.trial_id: steps for s in specs}, record_losses=True)  # fmt: skip
    _synchronize(device)
    packed_s = time.perf_counter() - start
    apart = max(abs(a - b) for s in specs
                for a, b in zip(alone[s.trial_id].losses, packed[s.trial_id].losses, strict=True))  # fmt: skip
    val_apart = max(abs(alone[s.trial_id].val_loss - packed[s.trial_id].val_loss) for s in specs)
    return {"model": "mlp3", "trials": trials, "steps": steps, "alone_s": alone_s,
            "packed_s": packed_s, "speedup": alone_s / packed_s,
            "max_train_loss_difference": apart, "max_val_loss_difference": val_apart,
            "bit_identical": apart == 0 and val_apart == 0}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu with --quick")
    parser.add_argument("--catalog-gpu", help="the catalog accelerator to predict (default: "
                        "the one the CUDA device's name names)")  # fmt: skip
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small models, batches and budgets: the code path, not the numbers",
    )
    parser.add_argument(
        "--profile-budget-s",
        type=bounded(POSITIVE),
        default=90.0,
        help="each profile's time budget (default 90 s; --quick 10 s)",
    )
    parser.add_argument("--trials", type=bounded(COUNT), default=16,
                        help="trials in the packed rung")  # fmt: skip
    parser.add_argument("--rung-steps", type=bounded(COUNT), default=200,
                        help="steps each trial trains")  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/gpu_check.json")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device here: the GPU check needs one (--device cpu --quick runs "
              "its code path on a CPU)", file=sys.stderr)  # fmt: skip
        return 2
    if device.type != "cuda" and not args.quick:
        print("error: on a CPU the check means nothing: add --quick to run its code path",
              file=sys.stderr)  # fmt: skip
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    try:
        acc = find_accelerator(args.catalog_gpu) if args.catalog_gpu else catalog_gpu(name)
    except UnknownNameError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    quick = args.quick
    cases = QUICK_CASES if quick else CASES
    budget = min(args.profile_budget_s, 10.0) if quick else args.profile_budget_s
    warmup, steps, rounds = (1, 2, 1) if quick else (5, 10, 3)
    print(f"GPU check on {name} (catalog {acc.name}), {len(cases)} models, "
          f"precisions {', '.join(p.value for p in PRECISIONS)}", file=sys.stderr)  # fmt: skip
    report: dict = {"benchmark": "gpu_check", "device": name, "catalog_gpu": acc.name,
                    "quick": quick, "models": [], "rows": []}  # fmt: skip
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for case in cases:
            print(f"profiling {case.model} on {args.device} (budget {budget:.0f} s)",
                  file=sys.stderr)  # fmt: skip
            made = profile_on(case, args.device, budget, quick, Path(folder))
            profile = Profile.load(made["path"]) if made["path"] else None
            report["models"].append({"model": case.model, "dataset": case.dataset,
                                     "profile_wall_s": made["wall_s"],
                                     "profile_warnings": made.get("warnings"),
                                     "profile_error": made.get("error"),
                                     "bmax": profile.bmax if profile else None})  # fmt: skip
            if profile is None:
                print(f"profiling {case.model} failed (in the report): {made['error'][-300:]}",
                      file=sys.stderr)  # fmt: skip
            for precision in PRECISIONS:
                for batch in case.batches:
                    predicted, method = (predicted_samples_per_s(profile, acc, precision, batch)
                                         if profile else (None, None))  # fmt: skip
                    measured = measured_samples_per_s(case, device, precision, batch, warmup,
                                                      steps, rounds)  # fmt: skip
                    report["rows"].append({
                        "model": case.model, "precision": precision.value, "batch": batch,
                        "measured_samples_per_s": measured, "predicted_samples_per_s": predicted,
                        "device_model": method,
                        "predicted_over_measured": (predicted / measured
                                                    if measured and predicted else None)})  # fmt: skip
        trials, rung_steps = (4, 3) if quick else (args.trials, args.rung_steps)
        print(f"packed Hyperband rung: {trials} trials x {rung_steps} steps", file=sys.stderr)
        try:
            report["packed_rung"] = packed_rung(device, trials, rung_steps)
        except (RuntimeError, ValueError) as exc:  # said in the report, not lost with the rest
            report["packed_rung"] = {"trials": trials, "steps": rung_steps, "error": str(exc)}
    ratios = [r["predicted_over_measured"] for r in report["rows"] if r["predicted_over_measured"]]
    report["median_absolute_error"] = (statistics.median(abs(r - 1) for r in ratios)
                                       if ratios else None)  # fmt: skip
    report["wall_s"] = time.perf_counter() - started
    write_report(args.out, report, args=argv)
    print(table(report))
    return 0


def table(report: dict) -> str:
    """The check as a user reads it: per row predicted against measured, then the rung."""
    lines = [f"{'model':<10} {'precision':<9} {'batch':>5} {'measured':>12} {'predicted':>12} "
             f"{'pred/meas':>9}"]  # fmt: skip
    for r in report["rows"]:
        measured = r["measured_samples_per_s"]
        shown = "does not fit" if measured is None else f"{measured:10.1f}/s"
        predicted = r["predicted_samples_per_s"]
        guess = "no profile" if predicted is None else f"{predicted:10.1f}/s"
        ratio = (
            "-" if r["predicted_over_measured"] is None else f"{r['predicted_over_measured']:.2f}"
        )
        lines.append(f"{r['model']:<10} {r['precision']:<9} {r['batch']:>5} {shown:>12} "
                     f"{guess:>12} {ratio:>9}")  # fmt: skip
    error = report["median_absolute_error"]
    lines.append("median |predicted/measured - 1|: "
                 + ("-" if error is None else f"{error:.1%}"))  # fmt: skip
    rung = report["packed_rung"]
    if "error" in rung:
        lines.append(f"packed rung failed: {rung['error']}")
        lines.append(f"whole check: {report['wall_s']:.0f} s")
        return "\n".join(lines)
    lines.append(f"packed rung: {rung['trials']} trials x {rung['steps']} steps, alone "
                 f"{rung['alone_s']:.2f} s, packed {rung['packed_s']:.2f} s: "
                 f"{rung['speedup']:.2f}x (paper: 2.7x); losses apart by at most "
                 f"{rung['max_train_loss_difference']:.2e}")  # fmt: skip
    lines.append(f"whole check: {report['wall_s']:.0f} s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
