"""The shared-memory slot protocol (runtime.slots), pure: layouts, and when a slot may be written.

No files and no processes: a pool is driven with fake slots, and the rules are
checked on the pool's bookkeeping — a busy slot is never handed out, a slot given up
while the peer may touch it is never handed out again, and a pool never keeps more
slots than its limit.
"""

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from rightsize.runtime.slots import (
    ALIGN_BYTES,
    IN,
    OUT,
    PAGE_BYTES,
    Layout,
    SlotPool,
    plan_layout,
    slot_bytes,
)


@dataclass(eq=False)
class FakeSlot:
    name: str
    nbytes: int
    unlinked: bool = False

    def unlink(self) -> None:
        assert not self.unlinked, f"{self.name} unlinked twice"
        self.unlinked = True


def pool(max_slots=4):
    made = []

    def make(nbytes):
        made.append(FakeSlot(f"s{len(made)}", nbytes))
        return made[-1]

    return SlotPool(make, max_slots), made


def test_a_layout_aligns_every_tensor_and_survives_the_wire():
    layout = plan_layout([("<f4", (3,)), ("<i8", (2, 5)), ("<f4", (0, 8)), ("|b1", (1,))])
    assert [e.offset for e in layout.entries] == [0, 64, 192, 192]
    assert [e.nbytes for e in layout.entries] == [12, 80, 0, 1]
    assert layout.nbytes == 256 and all(e.offset % ALIGN_BYTES == 0 for e in layout.entries)
    assert Layout.from_json(layout.to_json()).entries == layout.entries


def test_a_new_slot_has_room_to_grow_in_whole_pages():
    assert slot_bytes(1) == PAGE_BYTES
    assert slot_bytes(8 * PAGE_BYTES) == 10 * PAGE_BYTES  # 1.25 x, whole pages
    assert slot_bytes(8 * PAGE_BYTES + 1) == 11 * PAGE_BYTES


def test_a_busy_slot_is_written_again_only_after_it_is_released():
    slots, made = pool()
    first = slots.acquire(1000, (1, OUT))
    second = slots.acquire(1000, (2, OUT))
    assert first is not second  # the first is still the server's to read
    slots.release((1, OUT))  # answered
    assert slots.acquire(900, (3, OUT)) is first  # reused, nothing new made
    assert len(made) == 2 and not first.unlinked


def test_the_smallest_free_slot_that_fits_is_taken():
    slots, _ = pool()
    big = slots.acquire(100_000, (1, IN))
    small = slots.acquire(10, (2, OUT))
    slots.release((1, IN))
    slots.release((2, OUT))
    assert slots.acquire(10, (3, OUT)) is small
    assert slots.acquire(10, (4, OUT)) is big  # the only one left that fits


def test_a_slot_given_up_is_never_reused():
    slots, made = pool()
    lent = slots.acquire(500, (1, IN))
    sent = slots.acquire(500, (1, OUT))
    slots.discard((1, IN))  # forgotten: the server may still write it...
    slots.discard((1, OUT))  # ...or read it
    assert lent.unlinked and sent.unlinked
    again = slots.acquire(500, (2, OUT))
    assert again not in (lent, sent) and len(made) == 3
    slots.release((1, OUT))  # a late answer to the forgotten request changes nothing
    assert slots.acquire(500, (3, OUT)) not in (lent, sent)


def test_a_free_slot_too_small_makes_way_for_a_larger_one():
    slots, made = pool(max_slots=2)
    small = slots.acquire(100, (1, OUT))
    slots.acquire(100, (2, OUT))
    slots.release((1, OUT))
    large = slots.acquire(50_000, (3, OUT))
    assert small.unlinked and large.nbytes >= 50_000 and len(slots.free) + len(slots.busy) == 2


def test_with_every_slot_busy_the_request_goes_over_the_socket():
    slots, _ = pool(max_slots=2)
    assert slots.acquire(10, (1, OUT)) and slots.acquire(10, (2, OUT))
    assert slots.acquire(10, (3, OUT)) is None


def test_closing_unlinks_every_slot_free_or_busy():
    slots, made = pool()
    slots.acquire(10, (1, OUT))
    slots.acquire(10, (2, IN))
    slots.release((1, OUT))
    slots.close()
    assert all(s.unlinked for s in made) and not slots.free and not slots.busy


operations = st.lists(
    st.tuples(st.sampled_from(["acquire", "release", "discard", "reset"]),
              st.integers(0, 5), st.integers(1, 50_000)),  # fmt: skip
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_no_slot_is_ever_held_twice_or_handed_out_after_it_was_given_up(ops):
    slots, made = pool(max_slots=3)
    holders: dict[int, FakeSlot] = {}
    for op, token, nbytes in ops:
        if op == "acquire" and token not in holders:
            slot = slots.acquire(nbytes, token)
            if slot is not None:
                assert slot.nbytes >= nbytes and not slot.unlinked
                assert slot not in holders.values()  # nobody else may touch it
                holders[token] = slot
        elif op == "release":
            slots.release(token)
            holders.pop(token, None)
        elif op == "discard":
            slots.discard(token)
            gone = holders.pop(token, None)
            assert gone is None or gone.unlinked
        elif op == "reset":
            slots.discard_busy()
            assert all(s.unlinked for s in holders.values())
            holders.clear()
        live = [s for s in made if not s.unlinked]
        assert len(live) <= 3 and len(live) == len(slots.free) + len(slots.busy)
