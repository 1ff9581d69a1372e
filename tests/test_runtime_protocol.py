"""The master<->node protocol round-trips every message; liveness and capacity rules by hand."""

import json

import pytest

from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape, NodeRole, NodeSpec
from rightsize.runtime.capacity import capacity_problem, launch_wave
from rightsize.runtime.liveness import LivenessRule, credit_gap, silent_nodes
from rightsize.runtime.nodes import NodeState, Status
from rightsize.runtime.protocol import (
    Ack,
    AckKind,
    Checkpoint,
    ClusterView,
    Export,
    Grant,
    Heartbeat,
    LeaseRequest,
    Load,
    Message,
    NodeConfig,
    Pause,
    Progress,
    PSConfig,
    Pull,
    Pulled,
    Push,
    Pushed,
    RankConfig,
    Refusal,
    Refused,
    Register,
    Reply,
    Reset,
    Resume,
    Role,
    Sender,
    Stats,
    Stop,
    Threads,
    data_reply,
    data_request,
)
from rightsize.runtime.shards import Task

GI = 2**30


def wire(header: dict) -> dict:
    return json.loads(json.dumps(header))  # what the transport does to a header


@pytest.mark.parametrize("body", [
    Register(Role.PS, "tcp://127.0.0.1:5"), Register(Role.WORKER),
    Heartbeat(), Heartbeat((Ack(AckKind.LOADED, generation=4), Ack(AckKind.CHECKPOINTED, version=2)),
                           paused=True),
    LeaseRequest(), Progress(Task(1, 2, 0, 8), 3), Progress(Task(1, 2, 0, 8), 8),
])  # fmt: skip
@pytest.mark.parametrize("generation", [None, 0, 7])
def test_messages_round_trip(body, generation):
    message = Message(Sender("worker-3", 42, generation, Stats(1.5, 2.0, 3, 4, 5, 0.25, 6)), body)
    assert Message.from_header(wire(message.to_header())) == message


def test_progress_to_the_end_of_a_task_is_done():
    assert Progress(Task(0, 0, 2, 8), 8).done and not Progress(Task(0, 0, 2, 8), 7).done


@pytest.mark.parametrize("reply", [
    Reply(),
    Reply(commands=(Threads(2), Checkpoint(3, "/x/ps-0.pt"), Checkpoint(4), Export("/e", 2),
                    Load(5, ("a", "b"), ("/p",)), Pause(), Resume(), Reset(), Stop())),
    Reply(config=NodeConfig({"name": "j"}, 2, ps=PSConfig(3, ("w",), ()))),
    Reply(config=NodeConfig({"name": "j"}, 1, rank=RankConfig(1, 0, 2, "tcp://h:1", None, 9.0,
                                                               "/ck"))),
    Reply(cluster=ClusterView(3, {"ps-0": "tcp://a"}, {"w": "ps-0"}), lease=Grant(Task(0, 1, 2, 8), 4)),
    Reply(accepted=False),
])  # fmt: skip
def test_replies_round_trip(reply):
    assert Reply.from_header(wire(reply.to_header())) == reply


def test_a_cluster_needs_a_server_for_every_tensor():
    with pytest.raises(ValueError):
        ClusterView(1, {}, {})
    with pytest.raises(ValueError):
        ClusterView(1, {"ps-0": "a"}, {"w": "ps-1"})


def test_data_plane_requests_round_trip():
    assert data_request(wire(Pull(2, ("t",)).to_header())) == Pull(2, ("t",))
    push = Push(2, (0, 1, 2), ("d",), ("t",))
    assert data_request(wire(push.to_header())) == push
    with pytest.raises(ValueError, match="'fetch'"):
        data_request({"op": "fetch", "gen": 2, "tables": []})


@pytest.mark.parametrize("reply, header", [
    (Refused(Refusal.STALE), {"stale": True}),
    (Refused(Refusal.LOST), {"lost": True}),
    (Pulled(("a", "b")), {"dense": ["a", "b"]}),
    (Pushed(False), {"applied": False}),
])  # fmt: skip
def test_data_plane_replies_keep_their_wire_form_and_round_trip(reply, header):
    assert reply.to_header() == header  # what servers have always sent
    routed = {"rid": 7, "_r": 1, **wire(reply.to_header())}  # with the transport's own keys
    assert data_reply(routed) == reply


def test_a_header_that_is_no_data_plane_reply_is_refused():
    with pytest.raises(ValueError, match="not a parameter server's answer"):
        data_reply({"rid": 7, "done": True})


# -- liveness ---------------------------------------------------------------------------------
def node(name: str, role: NodeRole, heard_s: float | None, started: bool) -> NodeState:
    state = NodeState(NodeSpec(name, role, Resources(1, GI)), pid=1, launched_s=0.0,
                      status=Status.RUNNING, heard_s=heard_s)  # fmt: skip
    if started:
        state.generation, state.first_step_s = 1, 1.0
    return state


@pytest.mark.parametrize(
    "rule, steps, expected",
    [
        (LivenessRule(startup_s=180), [], 180),  # no step measured yet: the startup limit
        (LivenessRule(startup_s=180), [0.05, 0.2], 10.0),  # 20 x 0.2 s < the 10 s floor
        (LivenessRule(startup_s=180), [0.05, 2.0], 40.0),  # 20 x the slowest worker's step
        (LivenessRule(startup_s=180, timeout_s=5), [2.0], 5.0),  # the job file's own
    ],
)
def test_the_liveness_limit_follows_the_step_time(rule, steps, expected):
    assert rule.limit_s(steps) == expected


def test_silent_nodes_are_found_and_a_master_gap_is_credited():
    rule = LivenessRule(startup_s=60)
    nodes = [node("ps-0", NodeRole.PS, 100.0, True), node("worker-0", NodeRole.WORKER, 89.0, True),
             node("worker-1", NodeRole.WORKER, 80.0, False)]  # fmt: skip
    found = silent_nodes(nodes, 100.0, rule, [0.1])
    assert [(n.name, s) for n, s in found] == [("worker-0", 11.0)]  # worker-1: startup limit
    credit_gap(nodes, 5.0)  # the master was stopped for 5 s: nobody could be heard
    assert silent_nodes(nodes, 100.0, rule, [0.1]) == []


# -- capacity ----------------------------------------------------------------------------------
MACHINE = Resources(2, 24 * GI)


@pytest.mark.parametrize(
    "nodes, budget, message",
    [
        ([("worker-0", 1, 1)], Resources(2, 8 * GI), None),
        ([("worker-0", 16, 1)], Resources(16, 8 * GI), "node worker-0 asks for 16 CPU"),
        ([("worker-0", 1, 100)], Resources(2, 200 * GI), "node worker-0 asks for 100Gi of memory"),
        ([("worker-0", 1, 1), ("worker-1", 1.5, 1)], Resources(3, 8 * GI), "the shape asks for 2.5 CPU"),
        ([("worker-0", 1, 1)], Resources(6, 16 * GI), "budget asks for 6 CPU"),
    ],
)  # fmt: skip
def test_capacity_names_the_node_and_the_limit(nodes, budget, message):
    shape = ClusterShape(tuple(NodeSpec(n, NodeRole.WORKER, Resources(c, m * GI))
                               for n, c, m in nodes))  # fmt: skip
    problem = capacity_problem(shape, budget, MACHINE)
    if message is None:
        assert problem is None
    else:
        assert message in problem and "this machine has" in problem and "oversubscribe" in problem


def test_launches_come_in_waves_sized_by_the_machine():
    assert launch_wave(Resources(2, GI)) == 4 and launch_wave(Resources(0.5, GI)) == 2


def test_a_workers_step_length_ignores_its_idle_time():
    worker = node("worker-0", NodeRole.WORKER, 0.0, False)
    worker.heard(1.0, Stats(steps=10, busy_s=0.5))  # 10 steps of 50 ms
    assert worker.step_s == pytest.approx(0.05)
    worker.heard(30.0, Stats(steps=11, busy_s=0.55))  # one more, after 29 s waiting for a lease
    assert worker.step_s == pytest.approx(0.05)
    worker.heard(31.0, Stats(steps=12, busy_s=2.55))  # a 2 s step (a slow server) takes over
    assert worker.step_s == pytest.approx(2.0)
    worker.heard(32.0, Stats(steps=13, busy_s=2.6))  # and decays while steps are short again
    assert worker.step_s == pytest.approx(1.9)


def test_a_node_remembers_when_its_counts_last_grew():
    ps = node("ps-0", NodeRole.PS, 0.0, False)
    ps.heard(1.0, Stats(bytes_in=10.0))  # a heartbeat: nothing counted yet
    assert ps.counted_s is None
    ps.heard(2.0, Stats(bytes_in=20.0, updates=1))
    ps.heard(3.0, Stats(bytes_in=30.0, updates=1))  # heard again, nothing new applied
    assert (ps.heard_s, ps.counted_s) == (3.0, 2.0)
