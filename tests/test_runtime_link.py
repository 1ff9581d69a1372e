"""The parameter server's emulated link (``runtime.ps_bandwidth``): replies leave in order at
the link's rate while the server goes on working (runtime/ps.py)."""

import torch

from rightsize.runtime.ps import Link


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Sent:
    """A server that records what left, and when."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.replies = clock, []

    def reply(self, identity, header, tensors=()) -> None:
        self.replies.append((self.clock(), header["rid"]))


def floats(count: int) -> list[torch.Tensor]:
    return [torch.zeros(count)]  # 4 bytes each


def test_replies_leave_in_order_once_the_link_has_carried_them():
    clock = FakeClock()
    server = Sent(clock)
    link = Link(server, bytes_per_s=100.0, clock=clock)
    link.send("w", {"rid": 1}, floats(25))  # 100 bytes: on the link until t = 1
    link.send("w", {"rid": 2}, [])  # nothing to carry, but behind reply 1
    link.send("w", {"rid": 3}, floats(50))  # 200 bytes after reply 1: until t = 3
    assert server.replies == [] and link.wait_s(10.0) == 1.0
    clock.t = 1.0
    link.flush()
    assert server.replies == [(1.0, 1), (1.0, 2)] and link.wait_s(10.0) == 2.0
    clock.t = 3.0
    link.flush()
    assert [rid for _, rid in server.replies] == [1, 2, 3]


def test_the_server_works_while_its_link_sends():
    # the old pacer slept through each transmission; the link only delays the reply, so
    # what the server does meanwhile does not lengthen the next transmission
    clock = FakeClock()
    server = Sent(clock)
    link = Link(server, bytes_per_s=100.0, clock=clock)
    link.send("w", {"rid": 1}, floats(25))
    clock.t = 0.6  # the server applied a push meanwhile
    link.send("w", {"rid": 2}, floats(25))
    clock.t = 2.0
    link.flush()
    assert server.replies == [(2.0, 1), (2.0, 2)]
    assert link.free_at == 2.0  # two transmissions back to back: the link never idled


def test_without_a_cap_a_reply_leaves_at_once_and_the_rest_go_at_the_end():
    clock = FakeClock()
    server = Sent(clock)
    Link(server, None, clock=clock).send("w", {"rid": 1}, floats(10**6))
    assert server.replies == [(0.0, 1)]
    capped = Link(server, 1.0, clock=clock)
    capped.send("w", {"rid": 2}, floats(10))
    capped.flush(everything=True)  # the server is stopping
    assert server.replies[-1] == (0.0, 2)
