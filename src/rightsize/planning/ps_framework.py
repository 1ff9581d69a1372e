"""Whose parameter server a PS plan assumes, said in one line, and what it needs from the profile.

``plan --strategy ps --ps-framework`` chooses the framework whose PS service costs the plan
predicts with (perf/ps_profiles.py): ``rightsize``'s own runtime, the default, or TensorFlow
1.x's gRPC PS. The plan states which one, as it states its precision, because the same model
on the same VMs can differ by the PS alone (issue 40 item 5).

A framework that pays per variable needs the model's tensor counts. Profiles record them
(``Profile.tensors``, since issue 40); one made before has none, and :func:`with_tensor_counts`
counts them from the zoo's model of the same workload and options (built on the ``meta``
device: nothing allocated), or says in one line what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rightsize.core.errors import RightsizeError, SpecError
from rightsize.perf.ps_profiles import PROFILES, PSFramework
from rightsize.profiling.profile import Profile, TensorCounts


@dataclass(frozen=True)
class PSFrameworkStatement:
    """The PS framework the plans assume (``framework``) and what that means (``text``)."""

    framework: PSFramework

    @property
    def is_default(self) -> bool:
        return self.framework is PSFramework.RIGHTSIZE

    @property
    def text(self) -> str:
        return PROFILES[self.framework].summary

    def line(self) -> str:
        default = " (the default)" if self.is_default else ""
        others = ", ".join(f.value for f in PSFramework if f is not self.framework)
        return (f"PS framework {self.framework.value}{default}: {self.text}; "
                f"others: --ps-framework {others}")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"ps_framework": self.framework.value, "default": self.is_default,
                "assumes": self.text}  # fmt: skip


def with_tensor_counts(
    profile: Profile, framework: PSFramework, label: str = "the profile"
) -> Profile:
    """``profile``, with its tensor counts filled in from the zoo's model where ``framework``
    needs them and the profile predates them.

    Raises:
        SpecError: the framework needs them, the profile has none, and its workload is not a
            zoo model that builds with its options (a factory is not imported to count it).
    """
    if not PROFILES[framework].per_variable or profile.tensors is not None:
        return profile
    return profile.model_copy(update={"tensors": _zoo_counts(profile, framework, label)})


def _zoo_counts(profile: Profile, framework: PSFramework, label: str) -> TensorCounts:
    missing = (f"--ps-framework {framework.value} needs the model's tensor counts, which "
               f"{label} ({profile.workload}) does not record")  # fmt: skip
    if ":" in profile.workload:
        raise SpecError(f"{missing}; profile it again with rightsize profile")
    import torch  # only a plan that needs the counts pays for torch

    from rightsize.profiling.tensor_counts import count_tensors
    from rightsize.workloads.registry import WorkloadRegistry

    try:
        workload = WorkloadRegistry().get(profile.workload, profile.dataset, dict(profile.options))
        with torch.device("meta"):
            return count_tensors(workload.build_model())
    except RightsizeError as exc:
        raise SpecError(f"{missing} and it cannot be counted from the zoo ({exc}); profile "
                        "it again with rightsize profile") from None  # fmt: skip
