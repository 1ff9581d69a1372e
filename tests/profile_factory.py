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
