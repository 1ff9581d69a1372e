"""How benchmarks/run/runtime_moves.py names the moves of a report's timeline, by hand.

No job runs here: timelines written out, each row with the shape it left the job in.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: `benchmarks.`

from benchmarks.run import runtime_moves as rm  # noqa: E402

MI = 2**20


def node(name: str, cpu: float, memory_mi: int = 1024) -> dict:
    role = "ps" if name.startswith("ps") else "worker"
    return {"name": name, "role": role, "cpu": cpu, "memory": memory_mi * MI, "gpus": 0}


def row(action: str, nodes: list[dict], details: dict | None = None, applied: bool = True,
        time_s: float = 1.0) -> dict:  # fmt: skip
    return {"time_s": time_s, "action": action, "reason": action, "applied": applied,
            "transition_s": 0.5, "details": details or {}, "shape": {"nodes": nodes}}  # fmt: skip


def moves(*rows: dict) -> dict[str, list[str]]:
    return {m["move"]: m["nodes"] for m in rm.moves_of(list(rows))}


LAUNCH = row("launch", [node("ps-0", 0.6), node("ps-1", 0.6), node("worker-0", 0.4)], time_s=0.0)


def test_a_reshape_that_removes_a_ps_and_resizes_the_rest_in_place():
    # DLRover's eq. 10-11: ps-1 leaves, ps-0 and worker-0 get other CPU and memory in place
    reshape = row("reshape", [node("ps-0", 0.8, 1536), node("worker-0", 0.6, 377),
                              node("worker-1", 0.6, 377)],
                  {"resize ps-0_s": 0.02, "resize worker-0_s": 0.0, "remove_s": 1.5})  # fmt: skip
    assert moves(LAUNCH, reshape) == {
        "add_worker": ["worker-1"], "remove_ps": ["ps-1"],
        "resize_cpu": ["ps-0", "worker-0"], "resize_memory": ["ps-0", "worker-0"],
    }  # fmt: skip


def test_a_replacement_is_one_move_not_an_add_and_a_remove():
    replace = row("replace_ps", [node("ps-1", 0.6), node("worker-0", 0.4), node("ps-2", 1.0)])
    assert moves(LAUNCH, replace) == {"replace_ps": ["ps-0", "ps-2"]}


def test_a_rejected_row_moves_nothing_and_the_next_is_read_against_the_last_applied():
    rejected = row("add_ps", [*LAUNCH["shape"]["nodes"], node("ps-2", 0.2)], applied=False)
    rebalance = row("rebalance", [node("ps-0", 0.3), node("ps-1", 0.3), node("worker-0", 1.0)],
                    {f"resize {n}_s": 0.1 for n in ("ps-0", "ps-1", "worker-0")})  # fmt: skip
    assert moves(LAUNCH, rejected, rebalance) == {
        "resize_cpu": ["ps-0", "ps-1", "worker-0"], "rebalance": ["ps-0", "ps-1", "worker-0"],
    }  # fmt: skip


def test_a_dead_node_relaunched_with_more_memory_is_an_oom_relaunch_not_a_resize():
    start = row("launch", [node("ps-0", 0.6), node("worker-0", 1.0, 200)], time_s=0.0)
    relaunch = row("relaunch_oom", [node("ps-0", 0.6), node("worker-0", 1.0, 400)],
                   {"relaunch worker-0_s": 1.2})  # fmt: skip
    assert moves(start, relaunch) == {"relaunch_oom": ["worker-0"]}


def test_where_shown_lists_every_move_even_those_no_run_made():
    reshape = row("reshape", [node("ps-0", 0.6), node("worker-0", 0.4)], {"remove_s": 1.0})
    runs = [{"scenario": "s", "policy": "p", "report": "r.json", "exactly_once": True,
             "moves": rm.moves_of([LAUNCH, reshape])}]  # fmt: skip
    table = rm.where_shown(runs)
    assert set(table) == set(rm.MOVES)
    assert [r["scenario"] for r in table["remove_ps"]] == ["s"] and table["add_ps"] == []
