"""JobSpec, Constraints and Objective: what a user asks for, loaded from YAML.

A job file names the workload, its batch and length, the training strategy, a
resource budget, an initial shape (or ``auto`` for a policy to fill), where
checkpoints go, and — for planning — constraints (deadline, dollar budget) and
the objective to minimise. Quantities use the unit grammar of
:mod:`rightsize.core.units`. Validation errors name the field path, e.g.
``job.yaml: budget.cpu: expected cores like 2 or 2.5, or millicores like 500m``.
"""

from __future__ import annotations

import difflib
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from rightsize.core.errors import SpecError
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.units import parse_cpu, parse_duration, parse_memory, parse_money

Cpu = Annotated[float, BeforeValidator(parse_cpu)]
Memory = Annotated[int, BeforeValidator(parse_memory)]
Seconds = Annotated[float, BeforeValidator(parse_duration)]
Dollars = Annotated[float, BeforeValidator(parse_money)]


class Objective(StrEnum):
    """What a plan minimises: total dollars, or total wall time."""

    COST = "cost"
    TIME = "time"


class Strategy(StrEnum):
    """How gradients are exchanged: parameter servers, or collective allreduce."""

    PS = "ps"
    ALLREDUCE = "allreduce"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Constraints(_Spec):
    """Limits a plan must respect: a deadline and/or a dollar budget (either may be absent)."""

    deadline_s: Seconds | None = Field(default=None, alias="deadline")
    budget_usd: Dollars | None = Field(default=None, alias="budget")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ResourceSpec(_Spec):
    cpu: Cpu
    memory: Memory
    gpus: int = Field(default=0, ge=0)

    @property
    def resources(self) -> Resources:
        return Resources(self.cpu, self.memory, self.gpus)


class RoleSpec(ResourceSpec):
    """``count`` nodes of one role, each with ``cpu`` and ``memory``."""

    count: int = Field(ge=0)


class ShapeSpec(_Spec):
    ps: RoleSpec | None = None
    workers: RoleSpec

    def to_shape(self) -> ClusterShape:
        ps = self.ps or RoleSpec(count=0, cpu=0, memory=0)
        return ClusterShape.from_counts(
            ps.count, self.workers.count, ps.resources, self.workers.resources
        )


class CheckpointSpec(_Spec):
    dir: Path = Path("checkpoints")
    interval_s: Seconds = Field(default=60.0, alias="interval")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class JobSpec(_Spec):
    """One training job as the user describes it."""

    name: str = "job"
    workload: str = Field(min_length=1)
    dataset: str | None = None
    dataset_size: int | None = Field(default=None, ge=1)
    batch_size: int = Field(ge=1)
    epochs: int | None = Field(default=None, ge=1)
    steps: int | None = Field(default=None, ge=1)
    strategy: Strategy = Strategy.PS
    budget: ResourceSpec
    initial_shape: Literal["auto"] | ShapeSpec = "auto"
    checkpoint: CheckpointSpec = CheckpointSpec()
    constraints: Constraints = Constraints()
    objective: Objective = Objective.TIME

    @model_validator(mode="after")
    def _check(self) -> JobSpec:
        if self.epochs is not None and self.steps is not None:
            raise ValueError("give either epochs or steps, not both")
        if isinstance(self.initial_shape, ShapeSpec):
            total = self.initial_shape.to_shape().total()
            if not total.fits_within(self.budget.resources):
                raise ValueError(
                    f"initial_shape needs {total} but budget is {self.budget.resources}; "
                    "raise the budget or shrink the initial shape"
                )
            if self.strategy == Strategy.PS and self.initial_shape.ps is None:
                raise ValueError("strategy ps needs initial_shape.ps (or initial_shape: auto)")
        return self

    @property
    def length(self) -> tuple[str, int]:
        """``("steps", n)`` or ``("epochs", n)``; one epoch when neither is given."""
        if self.steps is not None:
            return "steps", self.steps
        return "epochs", self.epochs or 1


def load_job_spec(path: str | Path) -> JobSpec:
    """Read and validate a job YAML file.

    Raises:
        SpecError: unreadable file, bad YAML, or a field that fails validation.
    """
    label = str(path)
    data = _read_yaml(Path(path))
    return parse_job_spec(data, label)


def parse_job_spec(data: Any, label: str = "job") -> JobSpec:
    """Validate an already-parsed mapping (from YAML or an API request)."""
    if not isinstance(data, dict):
        raise SpecError(f"{label}: expected a mapping of fields at the top level")
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{label}: {describe_validation_error(exc, JobSpec)}") from None


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{path}{where}: {problem}") from None


def describe_validation_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """Turn pydantic's errors into one line: ``field.path: what is wrong; ...``."""
    errors = [(".".join(_plain_loc(e)), e) for e in exc.errors()]
    messages = []
    for field, error in errors:
        # a dict given where a union also allows a literal ("auto") fails both
        # branches; the literal branch's complaint is noise next to the real one
        if error["type"] == "literal_error" and any(
            other.startswith(field + ".") for other, _ in errors
        ):
            continue
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            loc = field.split(".")
            message = "unknown field" + _did_you_mean(loc[-1], _field_names(model, loc[:-1]))
        elif error["type"] == "missing":
            message = "required field is missing"
        messages.append(f"{field}: {message}" if field else message)
    return "; ".join(dict.fromkeys(messages))


def _plain_loc(error: dict) -> list[str]:
    return [str(part) for part in error["loc"] if not _is_union_tag(part)]


def _is_union_tag(part: object) -> bool:
    # pydantic names union branches in locations (e.g. "ShapeSpec", "literal['auto']")
    return isinstance(part, str) and (part[:1].isupper() or part.startswith("literal["))


def _field_names(model: type[BaseModel], path: list[str]) -> list[str]:
    for part in path:
        info = model.model_fields.get(part)
        annotation = getattr(info, "annotation", None)
        candidates = [a for a in getattr(annotation, "__args__", (annotation,)) if _is_model(a)]
        if not candidates:
            return []
        model = candidates[0]
    names = []
    for name, info in model.model_fields.items():
        names.append(info.alias or name)
    return names


def _is_model(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known fields: {', '.join(known)})" if known else ""
