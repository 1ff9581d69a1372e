"""Shared-memory segments and the transport over them (runtime.sharedmem, runtime.transport).

One process, real files in a temporary directory and real ZeroMQ sockets: a worker's
client and a server find out they share a host, then move tensors through slots with
only descriptors on the socket; a server that cannot open a slot makes the client go
back to sockets; segments are named per job and node, and removed by pid or swept
when their creator is dead.
"""

import os

import pytest
import torch
import zmq

from rightsize.runtime import sharedmem
from rightsize.runtime.segments import owner_pid, remove_segments, sweep_stale
from rightsize.runtime.sharedmem import Segment, SegmentGone, SharedMemory, host_identity
from rightsize.runtime.slots import OUT, Fill, plan_layout, slot_layout
from rightsize.runtime.transport import Client, Counters, Server, route

HOST = "host-a/boot/1"


@pytest.fixture
def sockets(tmp_path):
    """A server and a worker's client sharing ``tmp_path`` as their shared-memory directory."""
    context = zmq.Context()
    made = []

    def make(server_host=HOST, server_dir=tmp_path, client_host=HOST):
        server = Server(context, Counters(), shared=SharedMemory(server_host, server_dir))
        worker = SharedMemory(client_host, tmp_path, owner="job.worker-0")
        client = Client(context, server.address, Counters(), worker)
        made.append((server, client))
        return server, client

    yield make
    for server, client in made:
        client.close()
        server.close()
    context.destroy(linger=0)


def serve(server, answer=()):
    """Answer one request with ``answer`` (through the slot it lent, if any)."""
    identity, header, tensors = server.receive()
    server.reply(identity, {"rid": header["rid"], **route(header)}, answer)
    return header, tensors


def round_trip(server, client, tensors, answer=(), reply_bytes=0):
    rid = client.send({"op": "push"}, tensors, reply_bytes)
    header, received = serve(server, answer)
    assert client.ready(5.0)
    reply = client.receive()
    return rid, header, received, reply


def test_a_segment_written_by_one_mapping_is_read_by_another(tmp_path):
    layout = plan_layout([("<f4", (2, 3)), ("<i8", (4,))])
    owner = Segment.create(tmp_path / "rightsize.1.ab.j.w.0", layout.nbytes)
    values = [torch.arange(6.0).view(2, 3), torch.tensor([7, 8, 9, 10])]
    owner.write(layout, values)
    peer = Segment.attach(tmp_path / "rightsize.1.ab.j.w.0")
    assert all(torch.equal(a, b) for a, b in zip(peer.tensors(layout), values, strict=True))
    owner.unlink()
    assert torch.equal(peer.tensors(layout)[1], values[1])  # mapped pages outlive the name
    with pytest.raises(SegmentGone):
        Segment.attach(tmp_path / "rightsize.1.ab.j.w.0")


def test_a_descriptor_cannot_name_a_file_outside_the_segments(tmp_path):
    shared = SharedMemory(HOST, tmp_path)
    (tmp_path / "secret").write_bytes(b"x" * 64)
    for name in ("secret", "../secret", "rightsize.1.ab/../../secret"):
        with pytest.raises(SegmentGone):
            shared.attach(name)


def test_tensors_go_through_slots_once_the_server_said_it_shares_the_host(sockets):
    server, client = sockets()
    grads = [torch.arange(5), torch.randn(100, 10)]
    _, header, received, _ = round_trip(server, client, grads)
    assert header["host"] == HOST and "_s" not in header  # the first request asks, by socket
    assert client.peer_shares is True
    params = torch.randn(40, 8)
    answer = [Fill(params.dtype, (40, 8), lambda out: out.copy_(params))]
    rid, header, received, (reply, pulled) = round_trip(server, client, grads, answer, 40 * 8 * 4)
    assert "_r" in header and "host" not in header
    assert all(torch.equal(a, b) for a, b in zip(received, grads, strict=True))
    assert torch.equal(pulled[0], params)
    lent = client.pool.held((rid, "in"))
    assert pulled[0].numpy().base is not None and lent is not None  # a view of the lent slot
    client.done(rid)
    assert client.pool.held((rid, "in")) is None and lent in client.pool.free


def test_bytes_are_counted_the_same_through_slots_and_sockets(sockets):
    grads = [torch.randn(64, 64)]
    totals = []
    for shares in (False, True):
        server, client = sockets(server_host=HOST if shares else "another-host")
        round_trip(server, client, grads)  # the handshake
        before = (client.counters.bytes_out, server.counters.bytes_in)
        round_trip(server, client, grads)
        totals.append((client.counters.bytes_out - before[0], server.counters.bytes_in - before[1]))
    (out_socket, in_socket), (out_shared, in_shared) = totals
    assert out_shared >= 64 * 64 * 4 and in_shared >= 64 * 64 * 4
    assert abs(out_shared - out_socket) < 200 and abs(in_shared - in_socket) < 200  # headers


def test_another_host_keeps_the_socket(sockets):
    server, client = sockets(server_host="host-b/boot/1")
    round_trip(server, client, [torch.ones(10)])
    assert client.peer_shares is False
    _, header, received, _ = round_trip(server, client, [torch.ones(10)])
    assert "_s" not in header and "host" not in header and torch.equal(received[0], torch.ones(10))


def test_a_server_that_cannot_open_a_slot_answers_lost_and_the_client_goes_back_to_sockets(
    sockets, tmp_path
):
    elsewhere = tmp_path / "elsewhere"  # same host name, but not the same files
    elsewhere.mkdir()
    server, client = sockets(server_dir=elsewhere)
    round_trip(server, client, [torch.ones(10)])
    assert client.peer_shares is True
    client.send({"op": "push"}, [torch.ones(10)])
    identity, header, tensors = server.receive()
    assert tensors is None  # nothing to apply
    server.reply(identity, {"rid": header["rid"], "lost": True, **route(header)})
    assert client.ready(5.0) and client.receive()[0]["lost"] is True
    assert client.peer_shares is False
    _, header, received, _ = round_trip(server, client, [torch.ones(10)])
    assert "_s" not in header and torch.equal(received[0], torch.ones(10))


def test_no_room_for_a_slot_sends_by_socket_from_then_on(sockets, monkeypatch):
    server, client = sockets()
    round_trip(server, client, [torch.ones(10)])

    def full(nbytes):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(client.pool, "make", full)
    _, header, received, _ = round_trip(server, client, [torch.ones(10)])
    assert "_s" not in header and torch.equal(received[0], torch.ones(10))
    assert client.peer_shares is False


def test_a_forgotten_request_never_has_its_slot_written_again(sockets):
    server, client = sockets()
    round_trip(server, client, [torch.ones(10)])
    rid = client.send({"op": "push"}, [torch.ones(1000)])
    slot = client.pool.held((rid, OUT))
    client.forget(rid)  # a reset: the server may still read it
    assert slot.unlinked
    later = client.send({"op": "push"}, [torch.zeros(1000)])
    assert client.pool.held((later, OUT)) is not slot
    _, _, received = server.receive()
    assert received is None  # gone before the server mapped it: answered lost, never applied
    _, _, received = server.receive()
    assert torch.equal(received[0], torch.zeros(1000))


def test_a_slot_forgotten_after_the_server_mapped_it_keeps_its_values(sockets):
    server, client = sockets()
    round_trip(server, client, [torch.ones(10)])
    rid, *_ = round_trip(server, client, [torch.ones(1000)])  # the server maps this slot
    rid = client.send({"op": "push"}, [torch.full((1000,), 2.0)])  # the same slot, reused
    client.forget(rid)
    client.send({"op": "push"}, [torch.zeros(1000)])
    _, _, received = server.receive()
    assert torch.equal(received[0], torch.full((1000,), 2.0))  # not the later request's zeros


def test_a_sender_that_dies_mid_write_sends_no_descriptor(sockets, monkeypatch):
    server, client = sockets()
    round_trip(server, client, [torch.ones(10)])

    def dies(self, layout, tensors):
        self.bytes[:8] = 1  # part of the payload...
        raise KeyboardInterrupt  # ...then the process is gone

    monkeypatch.setattr(Segment, "write", dies)
    with pytest.raises(KeyboardInterrupt):
        client.send({"op": "push"}, [torch.ones(1000)])
    assert not server.socket.poll(200)  # nothing names the torn slot


def test_a_reply_too_large_for_the_lent_slot_comes_by_socket(sockets):
    server, client = sockets()
    round_trip(server, client, [])
    values = torch.randn(4096)
    _, _, _, (reply, pulled) = round_trip(server, client, [], [values], reply_bytes=64)
    assert "_s" not in reply and torch.equal(pulled[0], values)


def test_the_layout_a_worker_lends_for_is_the_one_the_server_writes():
    dense = torch.zeros(3, 5)
    rows = torch.zeros(7, 8)
    parts = [Fill(dense.dtype, (3, 5), lambda out: None), Fill(rows.dtype, (7, 8), lambda out: None)]
    assert slot_layout(parts) == slot_layout([dense, rows])


def test_segments_are_named_per_job_node_and_process(tmp_path):
    shared = SharedMemory(HOST, tmp_path, owner="my-job.worker-3")
    segment = shared.create(4096)
    assert segment.name.startswith(f"rightsize.{os.getpid()}.") and ".my-job.worker-3." in segment.name
    assert owner_pid(segment.name) == os.getpid() and owner_pid("rightsize.x.y") is None
    other = SharedMemory(HOST, tmp_path, owner="my-job.worker-3")  # a restarted process
    assert other.create(4096).name.split(".")[2] != segment.name.split(".")[2]  # fresh names


def test_an_ended_node_s_segments_are_removed_and_dead_ones_swept(tmp_path):
    for name in ("rightsize.111.aa.j.w.0", "rightsize.111.aa.j.w.1", "rightsize.222.bb.j.w.0",
                 "rightsize.333.cc.j.p.0", "unrelated"):  # fmt: skip
        (tmp_path / name).write_bytes(b"")
    assert remove_segments(111, tmp_path) == 2
    assert sweep_stale(tmp_path, alive=lambda pid: pid == 333) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rightsize.333.cc.j.p.0", "unrelated"]


def test_a_server_keeps_a_bounded_cache_of_mappings(tmp_path, monkeypatch):
    now = [0.0]
    owner = SharedMemory(HOST, tmp_path, owner="j.w")
    peer = SharedMemory(HOST, tmp_path, clock=lambda: now[0])
    monkeypatch.setattr(sharedmem, "MAX_ATTACHED", 3)
    names = [owner.create(4096).name for _ in range(5)]
    for name in names:
        peer.attach(name)
    assert list(peer._attached) == names[2:]  # the least recently used went first
    now[0] = sharedmem.IDLE_DETACH_S / 2
    peer.attach(names[3])
    now[0] = sharedmem.IDLE_DETACH_S + 1
    peer.detach_idle()
    assert list(peer._attached) == [names[3]]


def test_the_host_identity_needs_a_boot_id(tmp_path):
    assert host_identity(tmp_path, tmp_path / "missing") is None
    (tmp_path / "boot").write_text("abc\n")
    assert "/abc/" in host_identity(tmp_path, tmp_path / "boot")
