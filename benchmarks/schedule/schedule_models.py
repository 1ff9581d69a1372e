"""Turn real profiles (``rightsize profile``) into the measured inputs of the simulated jobs.

The simulator (``rightsize.cluster``) models each training job from a few
numbers per model: compute core-seconds per sample, the PS update cost,
parameter tensor sizes and memory. This script reads profiles taken on this
machine with one thread (so seconds are core-seconds) and writes them to
``src/rightsize/cluster/data/profiled_models.json``, which
``rightsize.cluster.models`` reads. Re-run it after re-profiling:

    for m in resnet50 mobilenetv2 densenet121 resnet18-cifar vgg19; do
      rightsize profile $m --dataset synthetic-cifar --threads 1 --max-batch 64 \\
        --memory-limit 2Gi --repeats 5 --out profiles/sim/$m.json; done
    rightsize profile gpt-small --threads 1 --max-batch 64 --memory-limit 2Gi \\
        --repeats 5 --out profiles/sim/gpt-small.json      # likewise bilstm, wide-deep
    python benchmarks/schedule/schedule_models.py profiles/sim/*.json
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from rightsize.profiling.profile import Profile

OUT = Path(__file__).resolve().parents[2] / "src/rightsize/cluster/data/profiled_models.json"


def entry(profile: Profile, path: str) -> dict:
    """The simulator's inputs from one profile, taken at its largest measured batch."""
    sample = max(profile.samples, key=lambda s: s.batch)
    threads = profile.device.threads
    return {
        "workload": profile.workload,
        "dataset": profile.dataset,
        "profile": os.path.basename(path),
        "device": f"{profile.device.name} ({threads} threads, torch {profile.device.torch_version})",
        "created_at": profile.created_at,
        "at_batch": sample.batch,
        "compute_core_s_per_sample": sample.total_s * threads / sample.batch,
        "optimizer_core_s": sample.optimizer_s * threads,
        "param_bytes": profile.param_bytes,
        "tensor_bytes": [layer.param_bytes for layer in profile.layers if layer.param_bytes],
        "resident_bytes": profile.memory.resident_bytes,
        "activation_bytes_per_sample": profile.memory.activation_bytes_per_sample,
        "flops_per_sample": sum(
            layer.forward_flops_per_sample + layer.backward_flops_per_sample
            for layer in profile.layers
        ),
        "latency_cv": profile.compute_cv,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="+", help="profile JSON files (taken with --threads 1)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    models = {}
    for path in args.profiles:
        profile = Profile.load(path)
        if profile.device.threads != 1:
            print(
                f"{path}: profile with --threads 1 (got {profile.device.threads})", file=sys.stderr
            )
            return 2
        models[profile.workload] = entry(profile, path)
    data = {
        "command": "python benchmarks/schedule/schedule_models.py " + " ".join(args.profiles),
        "note": "seconds are one core's seconds: every profile ran with one torch thread",
        "models": dict(sorted(models.items())),
    }
    out = Path(args.out)
    write_report(out, data, indent=1)
    print(f"wrote {len(models)} models to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
