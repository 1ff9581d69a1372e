"""Builds hand-made Profiles for tests (no measuring)."""

from rightsize.profiling.profile import (
    DeviceInfo,
    LatencySample,
    LayerProfile,
    MemoryProfile,
    Profile,
)


def sample(batch: int, forward: float, backward: float, optimizer: float = 0.001) -> LatencySample:
    return LatencySample(
        batch=batch, forward_s=forward, backward_s=backward, total_s=forward + backward,
        optimizer_s=optimizer, forward_cv=0.01, backward_cv=0.02, total_cv=0.03,
        peak_memory_bytes=1000 * batch, grad_ready=(1.0, 0.5), forward_runs_s=(forward,),
        backward_runs_s=(backward,),
    )  # fmt: skip


def make_profile(samples: list[LatencySample], bmax: int | None = None) -> Profile:
    return Profile(
        workload="toy", dataset="digits",
        device=DeviceInfo(kind="cpu", name="test cpu", threads=2, memory_bytes=2**30, torch_version="x"),
        bmax=bmax or max(s.batch for s in samples), bmax_limited_by="memory",
        memory=MemoryProfile(limit_bytes=2**30, limit_source="device", resident_bytes=100,
                             activation_bytes_per_sample=10.0, probes=((1, 1000),)),
        samples=tuple(samples),
        layers=(LayerProfile(name="fc1", param_count=10, param_bytes=40, forward_flops_per_sample=20,
                             backward_flops_per_sample=40, output_bytes_per_sample=8),
                LayerProfile(name="fc2", param_count=5, param_bytes=20, forward_flops_per_sample=10,
                             backward_flops_per_sample=20, output_bytes_per_sample=4)),
        created_at="2026-11-21T00:00:00+00:00", rightsize_version="test",
    )  # fmt: skip


def linear_profile(
    per_sample_s: float = 0.01,
    fixed_s: float = 0.02,
    bmax: int = 256,
    param_bytes: tuple[int, ...] = (40_000_000, 4_000_000),
    device_kind: str = "cpu",
    device_name: str = "test cpu",
) -> Profile:
    """A profile whose fwd+bwd time is ``fixed + per_sample·B`` (1/3 forward), with measured
    peaks (1 TFLOP/s, 100 GB/s) and a memory line of 1 MB + 1 MB per sample."""
    batches = sorted({1, round(bmax / 3), round(2 * bmax / 3), bmax})
    samples = [sample(b, (fixed_s + per_sample_s * b) / 3, 2 * (fixed_s + per_sample_s * b) / 3)
               for b in batches]  # fmt: skip
    layers = tuple(
        LayerProfile(name=f"layer{i}", param_count=size // 4, param_bytes=size,
                     forward_flops_per_sample=1e9, backward_flops_per_sample=2e9,
                     output_bytes_per_sample=1e5)
        for i, size in enumerate(param_bytes)
    )  # fmt: skip
    grads = tuple(1.0 - 0.5 * i / max(1, len(layers) - 1) for i in range(len(layers)))
    return Profile(
        workload="toy", dataset="synthetic-cifar",
        device=DeviceInfo(kind=device_kind, name=device_name, threads=1, memory_bytes=2**34,
                          torch_version="x", peak_flops_per_s=1e12, peak_mem_bytes_per_s=1e11),
        bmax=bmax, bmax_limited_by="memory",
        memory=MemoryProfile(limit_bytes=2**34, limit_source="device", resident_bytes=10**6,
                             activation_bytes_per_sample=5e5,
                             probes=((1, 2 * 10**6), (bmax, 10**6 + bmax * 10**6))),
        samples=tuple(s.model_copy(update={"grad_ready": grads}) for s in samples),
        layers=layers, forward_flops_per_sample=len(layers) * 1e9 + 1e8,
        backward_flops_per_sample=len(layers) * 2e9 + 2e8,
        created_at="2026-11-21T00:00:00+00:00", rightsize_version="test",
    )  # fmt: skip
