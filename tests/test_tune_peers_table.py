"""tune_peers_table.py --dominate over the committed tune_peers results (issue 41 item 3)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.tune.tune_peers_table import (
    SeedMedians,
    dominance_table,
    dominator,
    main,
    seed_medians,
)

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def _row(name: str, peer: bool, walls: tuple[float, ...], losses: tuple[float, ...]) -> SeedMedians:
    return SeedMedians(name, peer, tuple(range(len(walls))), walls, losses, (100,) * len(walls))


def test_a_peer_is_dominated_by_the_fastest_variant_no_worse_and_1_3x_faster():
    peer = _row("ray-asha", True, (20.0, 10.0, 30.0), (0.08, 0.09, 0.07))  # medians 20 s, 0.08
    slow = _row("slow", False, (16.0, 16.0, 16.0), (0.05, 0.05, 0.05))  # 1.25x: too slow
    poor = _row("poor", False, (5.0, 5.0, 5.0), (0.081, 0.081, 0.081))  # fast, loss worse
    good = _row("good", False, (15.0, 15.0, 1.0), (0.08, 0.2, 0.01))  # medians 15 s, 0.08
    best = _row("best", False, (10.0, 9.0, 11.0), (0.07, 0.07, 0.08))  # medians 10 s, 0.07
    assert dominator(peer, [slow, poor, good, best]) == best
    assert dominator(peer, [slow, poor, good]) == good  # ties in loss count as no worse
    assert dominator(peer, [slow, poor]) is None


def test_the_table_over_the_committed_seed_files():
    files = sorted(RESULTS.glob("tune_peers_small_cnn_seed*.json"))
    assert files, "the small CNN's seed files are committed"
    results = [json.loads(f.read_text()) for f in files]
    rows = seed_medians(results)
    asha = rows["ray-asha"]
    assert asha.peer and len(asha.seeds) == len(files)
    assert not rows["rightsize-packed-sha"].peer
    table = dominance_table(results)
    line = next(li for li in table.splitlines() if li.startswith("| ray-asha |"))
    winner = dominator(asha, [v for v in rows.values() if not v.peer])
    assert (f"**{winner.variant}**" if winner else "none") in line
    assert main([str(f) for f in files] + ["--dominate"]) == 0
