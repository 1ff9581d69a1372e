"""The cloud catalog: instance types, their accelerators, network and prices.

Instance rows use SkyPilot's catalog columns plus the rated network bandwidth
(``InstanceType, AcceleratorName, AcceleratorCount, vCPUs, MemoryGiB,
NetworkGbps, Price, SpotPrice, Region``); accelerators have their own table
(``name, memory_gib, fp32_tflops, fp16_tflops, mem_bandwidth_gbs``, and an optional
``tf32_tflops``) that the
performance models read peak rates from. One CSV per cloud ships with the
package (``catalog_data/``, sources and dates in its README); a user's CSV in
the same format loads by path and is validated row by row, so an error names the
file, the line and the column.

Queries are pure functions over an immutable :class:`Catalog`.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from rightsize.core.errors import SpecError, unknown_name
from rightsize.core.files import read_text

INSTANCE_COLUMNS = (
    "InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB",
    "NetworkGbps", "Price", "SpotPrice", "Region",
)  # fmt: skip
ACCELERATOR_COLUMNS = ("name", "memory_gib", "fp32_tflops", "fp16_tflops", "mem_bandwidth_gbs")
#: Optional: empty or absent where the device has no TF32 tensor cores (before Ampere).
#: ``sm_count``: streaming multiprocessors per device (the device model's wave quantisation).
#: ``issue_fraction``: the fraction of the FP32 cores the SMs' warp schedulers keep busy by
#: single issue (Kepler's SMX: 4 schedulers x 32 lanes for 192 cores, 2/3); empty: all.
ACCELERATOR_OPTIONAL_COLUMNS = ("tf32_tflops", "sm_count", "issue_fraction")
_DATA_PACKAGE = "rightsize.core.catalog_data"


@dataclass(frozen=True)
class Accelerator:
    """One accelerator model's datasheet numbers (per device as the cloud counts it)."""

    name: str
    memory_gib: float
    fp32_tflops: float
    fp16_tflops: float  # dense fp16/bf16 on tensor cores (P100: its 2x fp16 rate; K80: fp32)
    mem_bandwidth_gbs: float
    tf32_tflops: float | None = None  # dense TF32 tensor-core peak; None before Ampere
    sm_count: float | None = None  # streaming multiprocessors; None where not recorded
    issue_fraction: float | None = None  # FP32 cores kept busy by single issue; None: all

    @property
    def cuda_core_flops_per_s(self) -> float:
        """The FP32 rate the CUDA cores sustain without dual issue: the datasheet's peak
        counts every core, and Kepler's SMX fills a third of them only by issuing two
        independent instructions per warp per clock, which cuDNN's kernels rarely do."""
        return self.fp32_tflops * 1e12 * (self.issue_fraction or 1.0)


@dataclass(frozen=True)
class InstanceType:
    """One rentable machine type in one region."""

    name: str
    cloud: str
    region: str
    vcpus: int
    memory_gib: float
    network_gbps: float
    price_usd_per_hour: float
    spot_price_usd_per_hour: float | None
    accelerator: Accelerator | None
    accelerator_count: int

    @property
    def accelerator_name(self) -> str | None:
        return self.accelerator.name if self.accelerator else None

    def price(self, spot: bool = False) -> float:
        """Hourly price in USD; spot asks for the spot price, which must be known."""
        if not spot:
            return self.price_usd_per_hour
        if self.spot_price_usd_per_hour is None:
            raise SpecError(
                f"{self.name} ({self.region}) has no spot price in the {self.cloud} catalog; "
                "drop --spot or add a SpotPrice to your catalog CSV"
            )
        return self.spot_price_usd_per_hour

    def describe_accelerators(self) -> str:
        if not self.accelerator:
            return "-"
        return f"{self.accelerator_count}x{self.accelerator.name}"


@dataclass(frozen=True)
class Catalog:
    """An immutable set of instance types with lookup and filtering."""

    instances: tuple[InstanceType, ...]
    accelerators: tuple[Accelerator, ...]

    def __iter__(self) -> Iterator[InstanceType]:
        return iter(self.instances)

    def __len__(self) -> int:
        return len(self.instances)

    def get(self, name: str, region: str | None = None) -> InstanceType:
        """The instance type called ``name`` (in ``region``, else its first region).

        Raises:
            UnknownNameError: with the closest known name.
        """
        for instance in self.instances:
            if instance.name == name and (region is None or instance.region == region):
                return instance
        if region is not None and any(i.name == name for i in self.instances):
            regions = sorted({i.region for i in self.instances if i.name == name})
            raise unknown_name(f"region for {name}", region, regions)
        raise unknown_name("instance type", name, {i.name for i in self.instances})

    def accelerator(self, name: str) -> Accelerator:
        for acc in self.accelerators:
            if acc.name.lower() == name.lower():
                return acc
        raise unknown_name("accelerator", name, (a.name for a in self.accelerators))

    def filter(
        self,
        *,
        gpu: str | None = None,
        region: str | None = None,
        cloud: str | None = None,
        gpus_only: bool = False,
    ) -> Catalog:
        """Instances matching every given criterion (``gpu`` is case-insensitive).

        Raises:
            UnknownNameError: an accelerator or region the catalog does not have (a typo
                would otherwise print an empty table).
        """
        if gpu is not None:
            self.accelerator(gpu)
        if region is not None and region not in self.regions():
            raise unknown_name("region", region, self.regions())
        kept = tuple(
            i
            for i in self.instances
            if (gpu is None or (i.accelerator_name or "").lower() == gpu.lower())
            and (region is None or i.region == region)
            and (cloud is None or i.cloud == cloud)
            and (not gpus_only or i.accelerator is not None)
        )
        return replace(self, instances=kept)

    def regions(self) -> list[str]:
        return sorted({i.region for i in self.instances})

    def merged(self, other: Catalog) -> Catalog:
        accs = {a.name: a for a in self.accelerators + other.accelerators}
        return Catalog(self.instances + other.instances, tuple(accs.values()))


# -- loading ---------------------------------------------------------------------------


def builtin_catalogs() -> list[str]:
    """Names of the catalogs shipped with rightsize (``aws``, ``gcp``, ...)."""
    names = [
        p.name.removesuffix(".csv")
        for p in resources.files(_DATA_PACKAGE).iterdir()
        if p.name.endswith(".csv")
    ]
    return sorted(n for n in names if n != "accelerators")


def load_catalog(source: str | Path, accelerators: str | Path | None = None) -> Catalog:
    """Load a built-in catalog by cloud name, or a user's CSV by path.

    Args:
        source: ``aws``, ``gcp``, ``azure``, ``fc2-2018``, ``srift-2020`` or a CSV path.
        accelerators: an accelerators CSV to use instead of (and on top of) the built-in one.

    Raises:
        SpecError: a malformed file, with file, line and column in the message.
        UnknownNameError: an unknown cloud name.
    """
    accs = _read_accelerators(_builtin_text("accelerators"), "accelerators.csv")
    if accelerators is not None:
        extra = _read_accelerators(_read_path(Path(accelerators)), str(accelerators))
        accs = {**accs, **extra}
    path = Path(source)
    if path.suffix.lower() == ".csv" or path.exists():
        text, label, cloud = _read_path(path), str(path), path.stem
    elif str(source) in builtin_catalogs():
        text, label, cloud = _builtin_text(str(source)), f"{source}.csv", str(source)
    else:
        raise unknown_name("cloud catalog (or CSV path)", str(source), builtin_catalogs())
    instances = _read_instances(text, label, cloud, accs)
    return Catalog(instances, tuple(accs.values()))


def builtin_accelerators() -> tuple[Accelerator, ...]:
    """The built-in accelerators table, in its rows' order, without a cloud's instances."""
    return tuple(_read_accelerators(_builtin_text("accelerators"), "accelerators.csv").values())


def find_accelerator(name: str) -> Accelerator:
    """A built-in accelerator by name (case-insensitive), without loading a cloud's instances.

    Raises:
        UnknownNameError: with the closest known name.
    """
    return Catalog((), builtin_accelerators()).accelerator(name)


def load_catalogs(sources: Iterable[str | Path]) -> Catalog:
    """Several catalogs merged into one."""
    catalogs = [load_catalog(s) for s in sources]
    merged = catalogs[0]
    for catalog in catalogs[1:]:
        merged = merged.merged(catalog)
    return merged


def _builtin_text(name: str) -> str:
    return resources.files(_DATA_PACKAGE).joinpath(f"{name}.csv").read_text(encoding="utf-8")


def _read_path(path: Path) -> str:
    return read_text(path, "catalog")


def _rows(text: str, label: str, columns: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in columns if c not in header]
    if missing:
        raise SpecError(
            f"{label}: missing column(s) {', '.join(missing)}; "
            f"the header must be {','.join(columns)}"
        )
    for row in reader:
        clean = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
        if any(clean.values()):
            yield reader.line_num, clean


def _number(row: dict, column: str, where: str, *, integer=False, optional=False):
    raw = row[column]
    if raw == "" and optional:
        return None
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise SpecError(f"{where}: column {column} = {raw!r} is not {kind}") from None
    if not math.isfinite(value) or value < 0:
        raise SpecError(f"{where}: column {column} = {raw!r} must be finite and >= 0")
    return value


def _read_accelerators(text: str, label: str) -> dict[str, Accelerator]:
    accs = {}
    for line, row in _rows(text, label, ACCELERATOR_COLUMNS):
        where = f"{label} line {line}"
        if not row["name"]:
            raise SpecError(f"{where}: column name is empty")
        numbers = [_number(row, c, where) for c in ACCELERATOR_COLUMNS[1:]]
        optional = {c: _number({c: row.get(c, "")}, c, where, optional=True)
                    for c in ACCELERATOR_OPTIONAL_COLUMNS}  # fmt: skip
        issue = optional["issue_fraction"]
        if issue is not None and not 0 < issue <= 1:
            raise SpecError(f"{where}: column issue_fraction = {issue:g} must be in (0, 1]")
        accs[row["name"]] = Accelerator(row["name"], *numbers, **optional)
    return accs


def _read_instances(
    text: str, label: str, cloud: str, accs: dict[str, Accelerator]
) -> tuple[InstanceType, ...]:
    instances, seen = [], set()
    for line, row in _rows(text, label, INSTANCE_COLUMNS):
        instance = _instance(row, f"{label} line {line}", cloud, accs)
        key = (instance.name, instance.region)
        if key in seen:
            raise SpecError(f"{label} line {line}: duplicate row for {key[0]} in {key[1]}")
        seen.add(key)
        instances.append(instance)
    if not instances:
        raise SpecError(f"{label}: no instance rows")
    return tuple(instances)


def _instance(row: dict, where: str, cloud: str, accs: dict[str, Accelerator]) -> InstanceType:
    if not row["InstanceType"]:
        raise SpecError(f"{where}: column InstanceType is empty")
    acc_name, acc_count = (
        row["AcceleratorName"],
        _number(row, "AcceleratorCount", where, integer=True),
    )
    accelerator = None
    if acc_name:
        if acc_name not in accs:
            raise SpecError(
                f"{where}: accelerator {acc_name!r} is not in the accelerators table; "
                "add it there (--accelerators FILE) or fix the name"
            )
        if acc_count < 1:
            raise SpecError(f"{where}: AcceleratorCount must be >= 1 when AcceleratorName is set")
        accelerator = accs[acc_name]
    price = _number(row, "Price", where)
    spot = _number(row, "SpotPrice", where, optional=True)
    if price <= 0:
        raise SpecError(f"{where}: column Price must be > 0 (USD per hour)")
    return InstanceType(
        name=row["InstanceType"],
        cloud=cloud,
        region=row["Region"] or "unknown",
        vcpus=_number(row, "vCPUs", where, integer=True),
        memory_gib=_number(row, "MemoryGiB", where),
        network_gbps=_number(row, "NetworkGbps", where),
        price_usd_per_hour=price,
        spot_price_usd_per_hour=spot,
        accelerator=accelerator,
        accelerator_count=acc_count if accelerator else 0,
    )
