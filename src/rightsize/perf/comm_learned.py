"""The learned allreduce bandwidth model: gradient-boosted trees on probe records (Srift §4.2).

Srift trains GBDT regressors on its grid probes to predict bus bandwidth from
host features (hardware, memory, rated network), buffer size, world size and
concurrent transfers. Trained on all sizes at once the model predicted negative
bandwidth for small buffers, so Srift trains two: one for buffers up to the
MTU (latency-bound), one from the MTU up (bandwidth-bound), and selects
hyper-parameters by MAPE, finding pseudo-Huber loss best for small transfers
and squared error for large. Here LightGBM fits the candidates — squared error
and Huber loss on the bandwidth itself (Srift's), and squared error on its
logarithm, which cannot go negative — and 5-fold cross-validated MAPE picks one
per half. The model answers only for hosts it was probed on; any other link
goes to the analytic fallback, and ``kind_for`` says which answered.

A learned model is only worth using where it predicts better than the analytic
one. Fitting records both errors on the probes: the learned model's 5-fold
cross-validated MAPE (each half's chosen candidate, weighted by its records) and
the analytic model's MAPE (it fits nothing to the probes, so its error on each
held-out fold is its error on all of them). :meth:`LearnedCommModel.or_analytic`
gives the planner the analytic model when the learned one is worse, and says so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rightsize.core.errors import SpecError
from rightsize.core.files import atomic_write_text, read_json
from rightsize.perf.comm import AnalyticCommModel, CommModel, Link

if TYPE_CHECKING:  # lightgbm (and scikit-learn, scipy) load in seconds: only to fit or load
    import lightgbm as lgb

    from rightsize.profiling.comm_probe import ProbeRecord

FEATURES = ("log2_size", "world", "concurrent", "cores", "memory_gib", "rated_gbps")
# (name, LightGBM objective, learn the logarithm of the bandwidth?)
CANDIDATES = (("squared-error", "regression", False), ("huber", "huber", False),
              ("log-squared-error", "regression", True))  # fmt: skip
# one thread: the data are small, and threads only contend on a 2-vCPU machine
TREE_PARAMS = {"n_estimators": 300, "learning_rate": 0.05, "num_leaves": 15, "min_child_samples": 5,
               "n_jobs": 1}  # fmt: skip
FOLDS = 5
# Huber's delta is in the target's units (LightGBM's default, 0.9, is nothing next to
# bandwidths of 1e9 B/s, which made the loss pure L1 and the model flat): a tenth of
# the median bandwidth switches from squared to absolute error at a 10% miss.
HUBER_DELTA_FRACTION = 0.1
MODEL_SCHEMA = "rightsize.comm-model"


def mape(predicted: np.ndarray, actual: np.ndarray) -> float:
    return float(100 * np.mean(np.abs(predicted - actual) / actual))


def features(records: Sequence[ProbeRecord]) -> np.ndarray:
    return np.array([[math.log2(r.size_bytes), r.world, r.concurrent, r.cores, r.memory_gib, r.rated_gbps]
                     for r in records], dtype=float)  # fmt: skip


@dataclass
class _Half:
    """One of the two models: its chosen candidate and booster."""

    candidate: str
    log_target: bool
    booster: lgb.Booster
    cv_mape: dict[str, float]
    records: int = 0  # trained on (0 in files written before it was kept)

    def predict(self, x: np.ndarray) -> np.ndarray:
        y = self.booster.predict(x)
        return np.exp(y) if self.log_target else y


def _fit_candidate(
    x: np.ndarray, y: np.ndarray, objective: str, log_target: bool, seed: int
) -> lgb.Booster:
    import lightgbm as lgb

    target = np.log(y) if log_target else y
    params = {**TREE_PARAMS, "objective": objective, "random_state": seed, "verbose": -1}
    if objective == "huber":
        params["alpha"] = HUBER_DELTA_FRACTION * float(np.median(np.abs(target)))
    model = lgb.LGBMRegressor(**params)
    model.fit(x, target)
    return model.booster_


def _cv_mape(x, y, objective, log_target, seed) -> float:
    order = np.random.default_rng(seed).permutation(len(y))
    errors = []
    for fold in np.array_split(order, FOLDS):
        train = np.setdiff1d(order, fold)
        booster = _fit_candidate(x[train], y[train], objective, log_target, seed)
        pred = booster.predict(x[fold])
        errors.append(mape(np.exp(pred) if log_target else pred, y[fold]))
    return float(np.mean(errors))


def _fit_half(x: np.ndarray, y: np.ndarray, seed: int) -> _Half:
    if len(y) < FOLDS * 2:
        raise SpecError(
            f"need at least {FOLDS * 2} probe records per half of the model, got {len(y)}"
        )
    scores = {name: _cv_mape(x, y, obj, log, seed) for name, obj, log in CANDIDATES}
    name, objective, log_target = min(CANDIDATES, key=lambda c: scores[c[0]])
    booster = _fit_candidate(x, y, objective, log_target, seed)
    return _Half(name, log_target, booster, scores, len(y))


def analytic_mape(records: Sequence[ProbeRecord], model: CommModel | None = None) -> float:
    """The analytic model's MAPE on probe records (inf where a host has no rated bandwidth)."""
    model = model or AnalyticCommModel()
    if any(r.rated_gbps <= 0 for r in records):
        return math.inf  # a loopback probe: the analytic model has nothing to predict from
    predicted = np.array([
        model.bus_bandwidth(r.size_bytes, r.world,
                            Link(r.host, r.rated_gbps, r.cores, r.memory_gib, r.accelerator),
                            r.concurrent)
        for r in records
    ])  # fmt: skip
    return mape(predicted, np.array([r.bus_bytes_per_s for r in records]))


class LearnedCommModel(CommModel):
    """Two boosted-tree models split at the MTU, for the probed hosts; analytic elsewhere."""

    kind = "learned"

    def __init__(self, small: _Half, large: _Half, mtu_bytes: int, hosts: dict[str, dict],
                 fallback: CommModel | None = None,
                 analytic_mape: float | None = None) -> None:  # fmt: skip
        self.small, self.large, self.mtu_bytes, self.hosts = small, large, mtu_bytes, hosts
        self.fallback = fallback or AnalyticCommModel()
        self.analytic_mape = analytic_mape  # on the probes it was fitted to (None: not known)

    @property
    def cv_mape(self) -> float:
        """Cross-validated MAPE of the chosen candidates, weighted by each half's records."""
        halves = (self.small, self.large)
        weights = [h.records for h in halves] if all(h.records for h in halves) else [1, 1]
        errors = [h.cv_mape[h.candidate] for h in halves]
        return float(np.average(errors, weights=weights))

    def or_analytic(self) -> tuple[CommModel, str | None]:
        """This model, or the analytic fallback when that predicted the probes better, and why."""
        if self.analytic_mape is None or self.cv_mape <= self.analytic_mape:
            return self, None
        return self.fallback, (
            f"the learned comm model is not used: its cross-validated error (MAPE "
            f"{self.cv_mape:.1f}%) is worse than the analytic model's ({self.analytic_mape:.1f}%) "
            "on the same probes; planning with the analytic model"
        )

    @classmethod
    def fit(cls, records: Sequence[ProbeRecord], seed: int = 0) -> LearnedCommModel:
        """Train on probe records (sizes up to the MTU in one half, from the MTU up in the other)."""
        if not records:
            raise SpecError("no probe records to train on; run rightsize probe first")
        mtu = records[0].mtu_bytes
        x, y = features(records), np.array([r.bus_bytes_per_s for r in records])
        sizes = np.array([r.size_bytes for r in records])
        small, large = sizes <= mtu, sizes >= mtu
        hosts = {r.host: {"cores": r.cores, "memory_gib": r.memory_gib, "rated_gbps": r.rated_gbps}
                 for r in records}  # fmt: skip
        return cls(
            _fit_half(x[small], y[small], seed), _fit_half(x[large], y[large], seed), mtu, hosts,
            analytic_mape=analytic_mape(records),
        )  # fmt: skip

    def kind_for(self, link: Link) -> str:
        return self.kind if link.name in self.hosts else self.fallback.kind

    def predict_records(self, records: Sequence[ProbeRecord]) -> np.ndarray:
        x = features(records)
        small = np.array([r.size_bytes <= self.mtu_bytes for r in records])
        out = np.empty(len(records))
        if small.any():
            out[small] = self.small.predict(x[small])
        if (~small).any():
            out[~small] = self.large.predict(x[~small])
        return np.maximum(out, 1.0)  # a bandwidth is positive even where a tree undershoots

    def bus_bandwidth(self, size_bytes: int, world: int, link: Link, concurrent: int = 1) -> float:
        if link.name not in self.hosts:
            return self.fallback.bus_bandwidth(size_bytes, world, link, concurrent)
        if world <= 1:
            return math.inf
        host = self.hosts[link.name]
        row = np.array([[math.log2(max(1, size_bytes)), world, concurrent, host["cores"],
                         host["memory_gib"], host["rated_gbps"]]])  # fmt: skip
        half = self.small if size_bytes <= self.mtu_bytes else self.large
        return max(1.0, float(half.predict(row)[0]))

    # -- persistence ----------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        data = {
            "schema": MODEL_SCHEMA, "version": 1, "mtu_bytes": self.mtu_bytes, "hosts": self.hosts,
            "analytic_mape": _finite_or_none(self.analytic_mape),
            "halves": {
                name: {"candidate": h.candidate, "log_target": h.log_target, "cv_mape": h.cv_mape,
                       "records": h.records, "booster": h.booster.model_to_string()}
                for name, h in (("small", self.small), ("large", self.large))
            },
        }  # fmt: skip
        return atomic_write_text(path, json.dumps(data))

    @classmethod
    def load(cls, path: str | Path) -> LearnedCommModel:
        """Raises SpecError for an unreadable file or one that is not a whole comm model."""
        import lightgbm as lgb

        data = read_json(path, "comm model")
        if not isinstance(data, dict) or data.get("schema") != MODEL_SCHEMA:
            raise SpecError(
                f"{path} is not a rightsize comm model (train one with rightsize probe)"
            )
        try:
            halves = {
                name: _Half(h["candidate"], h["log_target"], lgb.Booster(model_str=h["booster"]),
                            h["cv_mape"], h.get("records", 0))
                for name, h in data["halves"].items()
            }  # fmt: skip
            # absent (an older file) or null (nothing to predict from): the learned model is used
            return cls(halves["small"], halves["large"], data["mtu_bytes"], data["hosts"],
                       analytic_mape=data.get("analytic_mape"))  # fmt: skip
        except (KeyError, TypeError, AttributeError, lgb.basic.LightGBMError) as exc:
            raise SpecError(
                f"comm model {path} is damaged ({type(exc).__name__}: {exc}); "
                "train it again with rightsize probe"
            ) from None


def _finite_or_none(value: float | None) -> float | None:
    """JSON has no infinity: an analytic model that could not predict is written as null."""
    return None if value is None or math.isinf(value) else value
