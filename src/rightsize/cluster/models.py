"""The simulated models: each a :class:`SimModel` built from a real profile and the papers.

Where the numbers come from:

- **Compute per sample, PS update cost, tensor sizes, memory** — measured on
  this machine by ``rightsize profile`` with one thread (so seconds are
  core-seconds) for the zoo models, collected in ``data/profiled_models.json``
  by ``benchmarks/schedule/schedule_models.py``. Compute is taken at the largest
  profiled batch.
- **NEARCHUS's five CNNs** (Table II: MobileNet, DenseNet-201, NasNetLarge,
  ResNet-50, Inception-V3) — parameter counts from NEARCHUS Table II; compute
  scaled from the nearest profiled zoo model by published multiply-adds per
  input pixel (MobileNet 569M at 224² [Howard 2017], MobileNetV2 300M at 224²
  [Sandler 2018], DenseNet-121 2.83G and -201 4.29G at 224², ResNet-50 4.09G
  at 224², Inception-V3 5.71G at 299² [torchvision model cards], NASNet-A
  Large 23.8G at 331² [Zoph 2018]); tensor sizes are the base model's scaled
  to the new parameter count.
- **Batch per worker step** — the model's one calibrated number: 1600 samples
  for the CNNs, so that ResNet-50 with (1 PS, 2 workers) on dedicated 64-core
  servers has each worker use about 37 vCPU at 10 Gbps and 16 at 1 Gbps, as
  NEARCHUS measures (§III-B, Fig. 5a: "36 vCPUs" and "16 vCPUs"); 512 for the
  click models (DLRover §6.1's batch), 256 for sequence models (ours).
- **PS work per step** — the measured optimizer step over all parameters,
  plus receiving the gradients and sending the parameters, ``2·P`` bytes, at
  ``PS_MESSAGE_BYTES_PER_CORE_S`` (our estimate, 1 GB per core-second: a bare
  memory copy runs near 10 GB/s here, and TensorFlow's gRPC path copies and
  (de)serializes every tensor several times).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from rightsize.cluster.jobmodel import SimModel
from rightsize.core.errors import unknown_name

PS_MESSAGE_BYTES_PER_CORE_S = 1e9
FP32_BYTES = 4
CNN_BATCH = 1600
CLICK_BATCH = 512
SEQUENCE_BATCH = 256


@dataclass(frozen=True)
class Derivation:
    """A simulated model derived from a profiled one.

    Attributes:
        base: the profiled zoo workload it is scaled from.
        compute_scale: compute per sample relative to the base.
        params: parameter count (``None``: the base's).
        batch_size: samples per worker step.
        source: where ``compute_scale`` and ``params`` come from.
    """

    base: str
    compute_scale: float = 1.0
    params: int | None = None
    batch_size: int = CNN_BATCH
    source: str = "profiled on this machine"


def _macs_per_pixel(macs: float, side: int) -> float:
    return macs / (side * side)


RESNET50 = _macs_per_pixel(4.09e9, 224)
DERIVATIONS = {
    # NEARCHUS Table II, the five CNNs of its single- and multi-job experiments.
    "mobilenet": Derivation(
        "mobilenetv2",
        _macs_per_pixel(569e6, 224) / _macs_per_pixel(300e6, 224),
        4_200_000,
        source="MobileNetV2 profile x MobileNet's 569M/300M mult-adds; 4.2M params (Table II)",
    ),
    "densenet201": Derivation(
        "densenet121",
        4.29 / 2.83,
        20_000_000,
        source="DenseNet-121 profile x 4.29G/2.83G FLOPs; 20M params (Table II)",
    ),
    "nasnetlarge": Derivation(
        "resnet50",
        _macs_per_pixel(23.8e9, 331) / RESNET50,
        84_900_000,
        source="ResNet-50 profile x NASNet-A Large 23.8G@331 / 4.09G@224; 84.9M params",
    ),
    "resnet50": Derivation("resnet50", 1.0, 23_000_000, source="profiled; 23M params (Table II)"),
    "inceptionv3": Derivation(
        "resnet50",
        _macs_per_pixel(5.71e9, 299) / RESNET50,
        24_000_000,
        source="ResNet-50 profile x Inception-V3 5.71G@299 / 4.09G@224; 24M params",
    ),
    # Zoo models as profiled, for other traces.
    "resnet18": Derivation("resnet18-cifar"),
    "mobilenetv2": Derivation("mobilenetv2"),
    "densenet121": Derivation("densenet121"),
    "vgg19": Derivation("vgg19"),
    "resnet50-imagenet": Derivation(
        "resnet50", (224 / 32) ** 2, source="ResNet-50 profile at 32x32 x (224/32)^2 pixels"
    ),
    "gpt-small": Derivation("gpt-small", batch_size=SEQUENCE_BATCH),
    "bilstm": Derivation("bilstm", batch_size=SEQUENCE_BATCH),
    "wide-deep": Derivation("wide-deep", batch_size=CLICK_BATCH),
}
NEARCHUS_CNNS = ("mobilenet", "densenet201", "nasnetlarge", "resnet50", "inceptionv3")


@cache
def profiled() -> dict[str, dict]:
    """The measured entries of ``data/profiled_models.json`` by zoo workload name."""
    text = resources.files("rightsize.cluster").joinpath("data/profiled_models.json").read_text()
    return json.loads(text)["models"]


def derive(name: str, how: Derivation, base: dict) -> SimModel:
    """A :class:`SimModel` from a profiled ``base`` entry scaled as ``how`` says."""
    base_params = base["param_bytes"] / FP32_BYTES
    param_scale = (how.params / base_params) if how.params else 1.0
    compute = base["compute_core_s_per_sample"] * how.compute_scale
    activations = base["activation_bytes_per_sample"] * how.compute_scale * how.batch_size
    return SimModel(
        name=name,
        param_bytes=int(base["param_bytes"] * param_scale),
        tensor_bytes=tuple(int(b * param_scale) for b in base["tensor_bytes"]),
        compute_core_s_per_sample=compute,
        batch_size=how.batch_size,
        update_core_s=base["optimizer_core_s"] * param_scale
        + 2 * base["param_bytes"] * param_scale / PS_MESSAGE_BYTES_PER_CORE_S,
        worker_memory_bytes=int(base["resident_bytes"] * param_scale + activations),
        source=f"{how.source}; base profile {base['profile']} on {base['device']}",
    )


def model_names() -> list[str]:
    return sorted(DERIVATIONS)


@cache
def sim_model(name: str) -> SimModel:
    """The simulated model ``name``.

    Raises:
        UnknownNameError: no such model (with a close match).
    """
    if name not in DERIVATIONS:
        raise unknown_name("simulated model", name, DERIVATIONS)
    how = DERIVATIONS[name]
    return derive(name, how, profiled()[how.base])
