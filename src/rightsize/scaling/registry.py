"""Policies by name, for the command line (``--policy static``) and job files.

One table from name to constructor; each policy validates its own parameters.
Add a policy by adding a row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rightsize.core.errors import SpecError, unknown_name
from rightsize.core.spec import JobSpec, Strategy
from rightsize.scaling.api import Policy
from rightsize.scaling.dlrover import DLRoverPolicy
from rightsize.scaling.goodput import GoodputPolicy
from rightsize.scaling.nearchus import NearchusPolicy
from rightsize.scaling.nearchus_plus import NearchusPlusPolicy
from rightsize.scaling.optimus import OptimusPolicy
from rightsize.scaling.static import FaBfPolicy, StaticPolicy

POLICIES: dict[str, Callable[..., Policy]] = {
    "static": StaticPolicy,
    "fa-bf": FaBfPolicy,
    "nearchus": NearchusPolicy,
    "nearchus+": NearchusPlusPolicy,
    "dlrover": DLRoverPolicy,
    "optimus": OptimusPolicy,
    "goodput": GoodputPolicy,
}

#: Policies with durations of their own, counted in metric intervals (scaling.pace).
PACED = frozenset({"nearchus", "nearchus+", "optimus"})


def policy_names(strategy: Strategy | None = None) -> list[str]:
    """Every policy's name (those that size jobs of ``strategy``, if given)."""
    return sorted(name for name, make in POLICIES.items()
                  if strategy is None or strategy in make.strategies)  # fmt: skip


def require_strategy(policy: Policy, strategy: Strategy) -> Policy:
    """``policy`` if it sizes jobs of ``strategy``.

    Raises:
        SpecError: it does not (with the policies that do).
    """
    if strategy not in policy.strategies:
        raise SpecError(f"policy {policy.name} sizes {' and '.join(sorted(policy.strategies))} "
                        f"jobs, not {strategy}; for {strategy}: "
                        f"{', '.join(policy_names(strategy))}")  # fmt: skip
    return policy


def make_policy(name: str, metric_interval_s: float | None = None, **params: Any) -> Policy:
    """A new policy ``name`` built with ``params``, counting its own durations in
    ``metric_interval_s`` (the mechanism's clock, see :mod:`scaling.pace`; default: the
    papers' minute).

    Raises:
        UnknownNameError: no such policy (with a close match).
        SpecError: the policy rejects a parameter.
    """
    if name not in POLICIES:
        raise unknown_name("policy", name, POLICIES)
    if metric_interval_s is not None and name in PACED:
        params = {**params, "metric_interval_s": metric_interval_s}
    try:
        return POLICIES[name](**params)
    except TypeError as exc:  # an unexpected keyword for this policy
        raise SpecError(f"policy {name}: {exc}") from None


#: The policies ``rightsize simulate`` compares unless told otherwise (NEARCHUS §V's and ours).
COMPARED = ("nearchus", "nearchus+", "dlrover", "optimus", "fa-bf")


def policies_named(names: list[str], params: dict[str, dict[str, Any]] | None = None,
                   flag: str = "--policies") -> list[Policy]:  # fmt: skip
    """The policies ``names``, each with its ``params``, for a comparison.

    Raises:
        UnknownNameError: an unknown policy.
        SpecError: an empty list, a repeated name or a bad parameter.
    """
    if not names:
        raise SpecError(f"{flag} is empty; name at least one, e.g. nearchus,fa-bf")
    if len(set(names)) != len(names):
        raise SpecError(f"{flag} {','.join(names)!r} names a policy twice")
    # the simulator models parameter-server jobs
    return [require_strategy(make_policy(name, **(params or {}).get(name, {})), Strategy.PS)
            for name in names]  # fmt: skip


def policy_for(spec: JobSpec, name: str | None = None) -> Policy:
    """The job's policy: the job file's, or ``name`` (a command line's override) with its
    default parameters — the job file's parameters belong to the job file's policy.

    Raises:
        RightsizeError: an unknown policy, bad parameters, or one that cannot size the
            job's strategy.
    """
    name = name or spec.policy.name
    params = spec.policy.params if name == spec.policy.name else {}
    return require_strategy(make_policy(name, spec.runtime.metric_interval_s, **params),
                            spec.strategy)  # fmt: skip
