"""Compute time on a device nobody measured: a measured profile scaled by a per-layer roofline.

Plans need step times on accelerators this machine does not have. With a
profile of the workload measured on device S (this CPU, or a GPU), the time on
a target device T is estimated as

    t_T(B) = t_S(B) · roof_T(B) / roof_S(B),
    roof_D(B) = Σ_layers max(FLOPs_l·B / P_D, bytes_l(B) / W_D) + L_D,

where P_D and W_D are D's peak FLOP/s and memory bandwidth (datasheet for the
target, measured for the profiling device, see profiling/peaks.py), and L_D a
per-layer kernel-launch cost on GPUs. Scaling the *measured* time keeps what the
profile knows (framework overheads, which layers run below peak) and assumes
the target reaches the same fraction of its roofline as the source — method
``ratio``. Method ``absolute`` instead divides the target's roofline by a fixed
efficiency. Both are estimates, and plans mark them so; their measured error
against real GPU step times is in docs/benchmarks.md.

A layer's bytes: its parameters read (forward) or read and written with their
gradient (backward), plus its input and output activations; work outside
parameter layers (activations, pooling, attention softmax) is one more term with
the model's remaining FLOPs and its saved-for-backward bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from rightsize.core.catalog import Accelerator, InstanceType
from rightsize.core.errors import SpecError
from rightsize.perf.compute import ComputeModel, ComputeTime
from rightsize.profiling.profile import Profile

GPU_LAUNCH_S = 5e-6  # one CUDA kernel launch through PyTorch's eager dispatcher
KERNELS_PER_LAYER = {"forward": 2, "backward": 3}  # e.g. conv + BN forward; dgrad, wgrad, BN
ABSOLUTE_EFFICIENCY = 0.35  # fp32 training reaches roughly a third of a GPU's peak
# A cloud vCPU (one hyperthread) with AVX-512 FMA: 32 fp32 FLOP/cycle at ~3 GHz; this
# machine's own vCPU measured 177 GFLOP/s on one thread with a second thread idle.
CPU_VCPU_FLOPS = 96e9
CPU_VCPU_MEM_BYTES_PER_S = 5e9  # ~5 GB/s of DRAM bandwidth per vCPU on cloud CPU hosts
METHODS = ("ratio", "absolute")


@dataclass(frozen=True)
class DeviceRates:
    """What the roofline needs to know about one device."""

    name: str
    flops_per_s: float
    mem_bytes_per_s: float
    memory_bytes: int
    launch_s: float = 0.0  # per kernel

    @classmethod
    def of_accelerator(cls, acc: Accelerator) -> DeviceRates:
        return cls(acc.name, acc.cuda_core_flops_per_s, acc.mem_bandwidth_gbs * 1e9,
                   int(acc.memory_gib * 2**30), GPU_LAUNCH_S)  # fmt: skip

    @classmethod
    def of_cpu_instance(cls, instance: InstanceType) -> DeviceRates:
        return cls(f"{instance.vcpus} vCPU", instance.vcpus * CPU_VCPU_FLOPS,
                   instance.vcpus * CPU_VCPU_MEM_BYTES_PER_S, int(instance.memory_gib * 2**30))  # fmt: skip

    @classmethod
    def of_profile(cls, profile: Profile) -> DeviceRates:
        """The profiling device's measured rates.

        Raises:
            SpecError: the profile predates peak measurement.
        """
        device = profile.device
        if not device.peak_flops_per_s or not device.peak_mem_bytes_per_s:
            raise SpecError(
                f"profile of {profile.workload} has no measured device peaks; "
                "re-run rightsize profile to scale it to other devices"
            )
        launch = GPU_LAUNCH_S if device.kind == "cuda" else 0.0
        return cls(device.name, device.peak_flops_per_s, device.peak_mem_bytes_per_s,
                   device.memory_bytes, launch)  # fmt: skip


def roofline_s(profile: Profile, rates: DeviceRates, batch: float, phase: str) -> float:
    """Σ over layers of max(compute, memory) time for ``phase`` (forward/backward) at ``batch``."""
    backward = phase == "backward"
    total, layer_flops = 0.0, 0.0
    for layer in profile.layers:
        flops = layer.backward_flops_per_sample if backward else layer.forward_flops_per_sample
        weights = layer.param_bytes * (3 if backward else 1)  # read w; read w, write dw, read grad
        moved = weights + (3 if backward else 2) * layer.output_bytes_per_sample * batch
        total += max(flops * batch / rates.flops_per_s, moved / rates.mem_bytes_per_s)
        layer_flops += flops
    model_flops = (
        profile.backward_flops_per_sample if backward else profile.forward_flops_per_sample
    )
    rest_flops = max(0.0, model_flops - layer_flops) * batch
    rest_bytes = 2 * profile.memory.activation_bytes_per_sample * batch
    total += max(rest_flops / rates.flops_per_s, rest_bytes / rates.mem_bytes_per_s)
    return total + rates.launch_s * KERNELS_PER_LAYER[phase] * len(profile.layers)


@dataclass(frozen=True)
class RooflineCompute:
    """Compute time on ``target`` scaled from a measured profile (see module docstring)."""

    profile: Profile
    measured: ComputeModel
    source: DeviceRates
    target: DeviceRates
    method: str = "ratio"
    efficiency: float = ABSOLUTE_EFFICIENCY

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise SpecError(f"unknown roofline method {self.method!r}; choose {', '.join(METHODS)}")

    def _phase(self, batch: float, phase: str, measured_s: float) -> float:
        target = roofline_s(self.profile, self.target, batch, phase)
        if self.method == "absolute":
            return target / self.efficiency
        return measured_s * target / roofline_s(self.profile, self.source, batch, phase)

    def predict(self, batch: float) -> ComputeTime:
        measured = self.measured.predict(batch)
        forward = self._phase(batch, "forward", measured.forward_s)
        backward = self._phase(batch, "backward", measured.backward_s)
        return ComputeTime(forward, backward, forward + backward)

    @property
    def optimizer_s(self) -> float:
        """The update reads and writes each parameter a few times: memory-bound, so scale by bandwidth."""
        return self.measured.optimizer_s * self.source.mem_bytes_per_s / self.target.mem_bytes_per_s
