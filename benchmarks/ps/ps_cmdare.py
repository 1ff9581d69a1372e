"""The PS models against CM-DARE's measured clusters: the reserved independent check (issue 18).

CM-DARE (Li, Walls, Guo, ICDCS 2020) trained CIFAR-10 ResNets with TensorFlow 1.10's
asynchronous parameter servers on Google Cloud: one PS VM of 4 vCPUs, 1-8 GPU workers (K80
or P100), batch 128 per worker (benchmarks/data/measured/README.md). Nothing in rightsize
was fitted, tuned or chosen on these rows; this only reads them at the end. Each curve is
predicted from what rightsize knows before any run, as ``plan --strategy ps`` predicts:

- a worker's step: the calibrated device model (perf/device_model.py) for the model's
  counted costs on that GPU at batch 128, fp32 — forward and backward (the PS applies the
  update);
- the PS's CPU per update: the optimizer step (SGD with momentum, Tensor2Tensor's default for
  these ResNets) over the model's parameters timed on this CPU, one thread — the profile's
  ``optimizer_s`` that FC2's planner takes; per byte moved, ``PS_CPU_S_PER_BYTE`` (fitted on
  this machine's runtime); the PS's 4 vCPUs; its link's efficiency ``PS_NETWORK_EFFICIENCY``
  (fitted on shaped links of this machine's runtime, benchmarks/ps/ps_link.py);
- links: Google Cloud's 2 Gbps per vCPU of the time (the PS 8 Gbps, a worker's 8 vCPUs 16).

It reports, per curve and model (DLRover's eq. 1, the planner's default, and the queueing
model): the MAPE over 1-8 workers, the saturation point (the first worker count whose next
adds < 10%) measured and predicted, and the one-worker error (the device model's alone).

    python benchmarks/ps/ps_cmdare.py --out benchmarks/results/ps_cmdare.json
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.plan import gpu_models
from benchmarks.plan import gpu_predictions as gp
from benchmarks.ps.ps_scaling import mape, saturation
from rightsize.core.catalog import find_accelerator
from rightsize.perf.device_model import Efficiencies, step_time
from rightsize.perf.precision import Precision
from rightsize.perf.ps import (
    PS_CPU_S_PER_BYTE,
    PS_NETWORK_EFFICIENCY,
    PSModel,
    PSSpec,
    WorkerSpec,
    predict_ps,
)

CMDARE = gp.DATA / "cmdare_ps_cifar10.csv"
BATCH = 128
PS_VCPUS = 4
GBPS_PER_VCPU = 2e9 / 8  # bytes/s
WORKER_VCPUS = 8
MODELS = ("resnet15-cifar", "resnet32-cifar")  # the ones gpu_models.py builds exactly


def update_s(model: str, repeats: int = 50) -> float:
    """Median seconds of one SGD-with-momentum step over the model's parameters, one thread."""
    import torch

    torch.set_num_threads(1)
    net = gpu_models.BUILDERS[model](None).model
    for p in net.parameters():
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    optimizer.step()  # allocates the momentum buffers
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def curves() -> dict[tuple[str, str], dict[int, float]]:
    """Measured steps/s of each (model, GPU) with one PS (the authors' value per cluster size;
    the one-worker point measured twice is their sweep's, not the base set's)."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    with CMDARE.open() as handle:
        for row in csv.DictReader(handle):
            if (row["model"] in MODELS and row["num_ps"] == "1"
                    and row["source_id"] == "cmdare_icdcs20"):  # fmt: skip
                out.setdefault((row["model"], row["gpu"]), {})[int(row["num_workers"])] = float(
                    row["steps_per_s"]
                )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/ps_cmdare.json")
    args = parser.parse_args(argv)
    eff = Efficiencies.shipped()
    sheets = gp.load_sheets(gp.SHEETS)
    result = {"benchmark": "ps_cmdare",
              "assumptions": {"batch": BATCH, "ps_vcpus": PS_VCPUS,
                              "ps_link_bytes_per_s": PS_VCPUS * GBPS_PER_VCPU,
                              "worker_link_bytes_per_s": WORKER_VCPUS * GBPS_PER_VCPU,
                              "ps_cpu_s_per_byte": PS_CPU_S_PER_BYTE,
                              "ps_network_efficiency": PS_NETWORK_EFFICIENCY},
              "curves": []}  # fmt: skip
    updates = {}
    for (model, gpu), measured in sorted(curves().items()):
        if (model, "") not in sheets:
            print(f"counting {model}'s costs", file=sys.stderr)
            sheets[model, ""] = gp.counted_apart(model, "")
        sheet = sheets[model, ""]
        if model not in updates:
            updates[model] = update_s(model)
        step = step_time(sheet, find_accelerator(gpu), Precision.FP32, BATCH, eff)
        worker = WorkerSpec(BATCH, step.forward_s + step.backward_s, WORKER_VCPUS * GBPS_PER_VCPU)
        ps = PSSpec(count=1, update_core_s=updates[model], cores=PS_VCPUS,
                    link_bytes_per_s=PS_VCPUS * GBPS_PER_VCPU,
                    cpu_s_per_byte=PS_CPU_S_PER_BYTE,
                    network_efficiency=PS_NETWORK_EFFICIENCY)  # fmt: skip
        entry = {"model": model, "gpu": gpu, "param_bytes": sheet.param_bytes,
                 "worker_compute_s": step.forward_s + step.backward_s,
                 "ps_update_s": updates[model], "measured": measured,
                 "measured_saturation_at": saturation(measured)}  # fmt: skip
        for kind in (PSModel.DLROVER, PSModel.QUEUEING):
            predicted = {n: predict_ps([worker] * n, ps, int(sheet.param_bytes), kind).steps_per_s
                         for n in sorted(measured)}  # fmt: skip
            entry[kind.value] = {"predicted": predicted, "mape": mape(predicted, measured),
                                 "one_worker_error": predicted[1] / measured[1] - 1,
                                 "saturation_at": saturation(predicted)}  # fmt: skip
            print(f"{model} {gpu} {kind.value}: MAPE {entry[kind.value]['mape']:.1%}, "
                  f"saturation {entry['measured_saturation_at']} measured, "
                  f"{entry[kind.value]['saturation_at']} predicted", file=sys.stderr)  # fmt: skip
        result["curves"].append(entry)
    gp.save_sheets(gp.SHEETS, sheets)
    write_report(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
