"""Overlapped PS training: the order of pulls, pushes and reports, and exactly-once counting.

A worker with ``runtime.overlap`` sends batch b+1's pull before batch b's push (each
server serves its socket in order, so the pull is answered before b is applied: one
step stale); without it the push goes first. Either way a batch is reported done
only after every server answered its push, and a halt finds every push reported.
The ordering is checked on a scripted cluster and master; exactly-once is checked
on real processes by the counting workload's weights (rightsize.workloads.counter).
"""

from types import SimpleNamespace

import pytest
import torch
import zmq

from rightsize.runtime.chaos import counter_job, trained_counts
from rightsize.runtime.master import Master
from rightsize.runtime.protocol import Grant, Pause, Progress, Reply, Resume
from rightsize.runtime.psclient import InFlight
from rightsize.runtime.shards import Task
from rightsize.runtime.transport import Client, Counters, Server
from rightsize.runtime.worker import Worker
from rightsize.scaling.registry import make_policy


class ScriptedCluster:
    """Records what a worker sends to its servers and when it waits for an answer."""

    generation = 1

    def __init__(self, log: list) -> None:
        self.log = log
        self.rid = 0

    def _request(self) -> InFlight:
        self.rid += 1
        return InFlight({"ps-0": self.rid})

    def send_pull(self, ids):
        request = self._request()
        self.log.append(("pull", request.rids["ps-0"]))
        return request

    def send_push(self, key, indices, dense, sparse):
        self.log.append(("push", key[2]))
        request = self._request()
        request.ids = {"batch": key[2]}  # remembered for the log of its answer
        return request

    def wait(self, request, on_stall):
        self.log.append(("answered", request.ids["batch"]))

    def forget(self, request):
        self.log.append(("forget", request.rids["ps-0"]))


def scripted_worker(overlap: bool, answers: dict[int, Reply] | None = None):
    """A worker whose compute, cluster and master are scripted; returns it and its log."""
    log, answers = [], answers or {}
    worker = object.__new__(Worker)
    worker.overlap, worker.paused = overlap, False
    worker.cluster = ScriptedCluster(log)

    def call(body):
        if isinstance(body, Progress):
            log.append(("progress", body.next_batch))
            return answers.get(body.next_batch, Reply(accepted=True)), []
        log.append(("heartbeat", body.paused))
        return Reply(commands=(Resume(),)), []

    worker.ctx = SimpleNamespace(call=call, spec=SimpleNamespace(batch_size=2), steps=0,
                                 samples=0, loss_sum=0.0, loss_n=0, busy_s=0.0)  # fmt: skip
    worker.workload = SimpleNamespace(batch=lambda indices: ((indices,), indices))
    worker.lookups = SimpleNamespace(discover=lambda inputs: {})

    def compute(ready):
        log.append(("compute", ready.batch))
        return torch.tensor(0.0), ({}, {})

    worker.compute = compute
    return worker, log


def train(worker, batches: int = 3) -> None:
    worker.train(Grant(Task(0, 0, 0, batches), 0), torch.arange(2 * batches))


def test_overlap_sends_the_next_pull_before_this_push_and_reports_after_the_answer():
    worker, log = scripted_worker(overlap=True)
    train(worker)
    assert [e for e in log if e[0] != "forget"] == [
        ("pull", 1), ("compute", 0),
        ("pull", 2), ("push", 0),
        ("compute", 1), ("pull", 4), ("push", 1), ("answered", 0), ("progress", 1),
        ("compute", 2), ("push", 2), ("answered", 1), ("progress", 2),
        ("answered", 2), ("progress", 3),
    ]  # fmt: skip
    assert worker.ctx.steps == 3


def test_without_overlap_each_pull_follows_the_push_before_it():
    worker, log = scripted_worker(overlap=False)
    train(worker)
    assert log == [
        ("pull", 1), ("compute", 0), ("push", 0), ("pull", 3), ("answered", 0), ("progress", 1),
        ("compute", 1), ("push", 1), ("pull", 5), ("answered", 1), ("progress", 2),
        ("compute", 2), ("push", 2), ("answered", 2), ("progress", 3),
    ]  # fmt: skip


@pytest.mark.parametrize("overlap", [True, False])
def test_a_halt_finds_every_push_answered_and_reported(overlap):
    worker, log = scripted_worker(overlap, {1: Reply(commands=(Pause(),), accepted=True)})
    train(worker)
    halted = log.index(("heartbeat", True))
    assert ("progress", 2) in log[:halted] or not overlap  # overlap: batch 1 was out too
    pushed = {b for kind, b in log[:halted] if kind == "push"}
    reported = {b - 1 for kind, b in log[:halted] if kind == "progress"}
    assert pushed == reported  # nothing in flight while halted
    assert log[halted - 1][0] == "forget"  # the next batch's pull is redone after the halt
    assert [b for kind, b in log if kind == "progress"] == [1, 2, 3]


def test_a_client_matches_replies_to_several_requests_in_flight():
    context = zmq.Context()
    server = Server(context, Counters())
    client = Client(context, server.address, Counters())
    try:
        first, second = client.send({"n": 1}), client.send({"n": 2})
        for _ in range(2):
            identity, header, _ = server.receive()
            server.reply(identity, {"rid": header["rid"], "n": header["n"]})
        client.forget(first)  # given up: its reply is dropped
        assert client.ready(5.0) and client.receive() is None
        header, _ = client.receive()
        assert (header["rid"], header["n"]) == (second, 2)
    finally:
        client.close()
        server.close()
        context.destroy(linger=0)


@pytest.mark.integration
@pytest.mark.parametrize("overlap", [True, False])
def test_every_sample_is_applied_exactly_once_per_epoch(tmp_path, overlap):
    epochs = 6
    _, spec = counter_job(tmp_path, epochs=epochs, samples=1024, overlap=overlap)
    report = Master(spec, make_policy("static"), fresh=True, warn=lambda _: None).run()
    assert report["accounting"]["exactly_once"] is True
    counts = trained_counts(spec)
    assert counts and all(bool((c == epochs).all()) for c in counts.values())
