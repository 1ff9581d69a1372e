"""The tables of docs/benchmarks.md from tune_peers.py's results (nothing is measured here).

One result file: a row per variant (median wall and CPU seconds over the repeats,
trial-steps, trials, overhead, the best configuration and its re-trained loss).
Several files (the same command with other ``--seed`` values): per seed, each
chosen variant's wall time, trial-steps and re-trained loss, and the wall-time
ratio of every variant to the first one named, with the median over seeds::

    python benchmarks/tune/tune_peers_table.py benchmarks/results/tune_peers_small_cnn.json
    python benchmarks/tune/tune_peers_table.py benchmarks/results/tune_peers_small_cnn_seed*.json \\
        --variants rightsize-packed-sha,ray-asha,rightsize-packed

``--dominate``: the medians over the files (one per search seed) of every variant's wall
time and re-trained loss, with their spreads, and for each peer (Optuna, Ray Tune) the
rightsize variant that dominates it (median loss no worse, median wall at least
``--factor`` times shorter; the fastest such), or none with the nearest miss::

    python benchmarks/tune/tune_peers_table.py benchmarks/results/tune_peers_mlp3_final_seed*.json --dominate
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_KEYS = ("batch_size", "optimizer", "lr", "activation")
#: Tools whose variants are peers; every other tool's are rightsize's.
PEER_TOOLS = ("optuna", "ray")
#: Domination: the rightsize variant's median wall time at least this many times shorter.
WALL_FACTOR = 1.3


def variant_table(result: dict[str, Any]) -> str:
    """Markdown: one row per variant that has a result."""
    head = ["variant", "wall s", "wall / packed", "CPU s", "trial-steps", "to R / stopped",
            "overhead ms/trial", "best (batch, optimizer, lr, activation)", "re-trained val loss"]  # fmt: skip
    rows = []
    for name, row in result["variants"].items():
        if "wall_s" not in row:
            continue
        best = row["best"]["config"] if row.get("best") else {}
        retrain = row.get("retrain_val_loss")
        rows.append([
            name, f"{row['wall_s']:.1f}", f"{row.get('wall_vs_packed', float('nan')):.2f}×",
            f"{row['cpu_s']:.1f}", _steps(row),
            f"{row['trials_finished']}/{row['trials_pruned']}",
            f"{1000 * row['overhead_per_trial_s']:.0f}",
            ", ".join(str(best.get(k, "-")) for k in CONFIG_KEYS),
            "-" if retrain is None else f"{retrain:.4f}",
        ])  # fmt: skip
    return _markdown(head, rows)


def _steps(row: dict[str, Any]) -> str:
    """Trial-steps; the range over the repeats where an asynchronous tool's count varies."""
    runs = row.get("trial_steps_runs") or [row["trial_steps"]]
    low, high = min(runs), max(runs)
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def seeds_table(results: list[dict[str, Any]], variants: list[str]) -> str:
    """Markdown: per result (seed), each variant's wall s, trial-steps and re-trained loss,
    and each variant's wall time over the first's; the last row holds the medians."""
    base = variants[0]
    head = ["seed"] + [f"{v}: wall s, steps, loss" for v in variants]
    head += [f"{v} / {base}" for v in variants[1:]]
    rows, ratios = [], {v: [] for v in variants[1:]}
    for result in sorted(results, key=lambda r: r["settings"]["seed"]):
        found = result["variants"]
        row = [str(result["settings"]["seed"])]
        for v in variants:
            r = found.get(v, {})
            row.append(
                f"{r['wall_s']:.1f}, {r['trial_steps']:,}, {r['retrain_val_loss']:.4f}"
                if "wall_s" in r else "-"
            )  # fmt: skip
        for v in variants[1:]:
            if "wall_s" in found.get(v, {}) and "wall_s" in found.get(base, {}):
                ratios[v].append(found[v]["wall_s"] / found[base]["wall_s"])
                row.append(f"{ratios[v][-1]:.2f}×")
            else:
                row.append("-")
        rows.append(row)
    medians = ["median"] + [_median_cell(results, v) for v in variants]
    medians += [f"{statistics.median(ratios[v]):.2f}×" if ratios[v] else "-" for v in variants[1:]]
    return _markdown(head, rows + [medians])


def _median_cell(results: list[dict[str, Any]], variant: str) -> str:
    rows = [r["variants"][variant] for r in results if "wall_s" in r["variants"].get(variant, {})]
    if not rows:
        return "-"
    wall = statistics.median(r["wall_s"] for r in rows)
    steps = statistics.median(r["trial_steps"] for r in rows)
    loss = statistics.median(r["retrain_val_loss"] for r in rows)
    return f"{wall:.1f}, {steps:,.0f}, {loss:.4f}"


@dataclass(frozen=True)
class SeedMedians:
    """A variant over several search seeds: its medians and the ranges around them."""

    variant: str
    peer: bool
    seeds: tuple[int, ...]
    walls_s: tuple[float, ...]
    losses: tuple[float, ...]
    trial_steps: tuple[int, ...]
    finished: tuple[int, ...] = ()

    @property
    def wall_s(self) -> float:
        return statistics.median(self.walls_s)

    @property
    def loss(self) -> float:
        return statistics.median(self.losses)

    @property
    def steps(self) -> float:
        return statistics.median(self.trial_steps)


def per_trial_step_ms(v: SeedMedians) -> float:
    """Median wall over median trial-steps: what one trial-step costs the variant (packing's
    efficiency, with the framework's overhead spread over its steps)."""
    return 1000 * v.wall_s / v.steps


def seed_medians(results: list[dict[str, Any]]) -> dict[str, SeedMedians]:
    """Every variant with a re-trained loss in ``results`` (one file per seed), over the seeds."""
    found: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for result in sorted(results, key=lambda r: r["settings"]["seed"]):
        for name, row in result["variants"].items():
            if row.get("retrain_val_loss") is not None:
                found.setdefault(name, []).append((result["settings"]["seed"], row))
    return {
        name: SeedMedians(
            name, rows[0][1]["tool"] in PEER_TOOLS, tuple(seed for seed, _ in rows),
            tuple(r["wall_s"] for _, r in rows), tuple(r["retrain_val_loss"] for _, r in rows),
            tuple(r["trial_steps"] for _, r in rows), tuple(r["trials_finished"] for _, r in rows),
        )
        for name, rows in found.items()
    }  # fmt: skip


def dominator(
    peer: SeedMedians, ours: list[SeedMedians], factor: float = WALL_FACTOR
) -> SeedMedians | None:
    """The fastest of ``ours`` whose median loss is no worse than ``peer``'s and whose median
    wall time is at least ``factor`` times shorter (None: no such variant)."""
    winners = [v for v in ours if v.loss <= peer.loss and peer.wall_s >= factor * v.wall_s]
    return min(winners, key=lambda v: v.wall_s) if winners else None


def nearest_miss(peer: SeedMedians, ours: list[SeedMedians], factor: float = WALL_FACTOR) -> str:
    """Why no variant dominates ``peer``: the fastest at least as good (too slow), and the
    best of those fast enough (too poor)."""
    good = [v for v in ours if v.loss <= peer.loss]
    fast = [v for v in ours if peer.wall_s >= factor * v.wall_s]
    parts = []
    if good:
        v = min(good, key=lambda v: v.wall_s)
        parts.append(f"as good: {v.variant} only {peer.wall_s / v.wall_s:.2f}× faster")
    if fast:
        v = min(fast, key=lambda v: v.loss)
        parts.append(f"fast enough: {v.variant} loss {v.loss:.4f} > {peer.loss:.4f}")
    return "; ".join(parts) or "no rightsize variant"


def dominance_table(results: list[dict[str, Any]], factor: float = WALL_FACTOR) -> str:
    """Markdown: per variant the seeds, median wall (range), median loss (range), median
    trial-steps, and for a peer the rightsize variant that dominates it, or the nearest miss."""
    rows = seed_medians(results)
    ours = [v for v in rows.values() if not v.peer]
    head = ["variant", "seeds", "wall s median (range)", "re-trained loss median (range)",
            "trial-steps median", "trials to R median", "wall ms per trial-step",
            f"dominated by (loss no worse, ≥{factor:g}× faster)"]  # fmt: skip
    lines = []
    for v in sorted(rows.values(), key=lambda v: (not v.peer, v.variant)):
        verdict = ""
        if v.peer:
            winner = dominator(v, ours, factor)
            verdict = (
                f"**{winner.variant}** ({v.wall_s / winner.wall_s:.2f}×, {winner.loss:.4f})"
                if winner else f"none — {nearest_miss(v, ours, factor)}"
            )  # fmt: skip
        lines.append([
            v.variant, ",".join(map(str, v.seeds)),
            f"{v.wall_s:.1f} ({min(v.walls_s):.1f}-{max(v.walls_s):.1f})",
            f"{v.loss:.4f} ({min(v.losses):.4f}-{max(v.losses):.4f})",
            f"{v.steps:,.0f}", f"{statistics.median(v.finished):g}",
            f"{per_trial_step_ms(v):.2f}", verdict,
        ])  # fmt: skip
    return _markdown(head, lines)


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="tune_peers.py result files")
    parser.add_argument("--variants", help="several files: the variants to compare, base first")
    parser.add_argument(
        "--dominate", action="store_true",
        help="medians over the files (seeds) and, per peer, the rightsize variant dominating it",
    )  # fmt: skip
    parser.add_argument("--factor", type=float, default=WALL_FACTOR, help="--dominate's wall ratio")
    args = parser.parse_args(argv)
    results = [json.loads(path.read_text()) for path in args.results]
    if args.dominate:
        print(dominance_table(results, args.factor))
        return 0
    if len(results) == 1 and not args.variants:
        print(variant_table(results[0]))
        return 0
    if not args.variants:
        parser.error("several result files: name the variants to compare with --variants")
    print(seeds_table(results, args.variants.split(",")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
