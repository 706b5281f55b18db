"""Tests for tempo.wheel: unit cases and a stateful comparison with a simple model."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tempo.wheel import TimingWheel

T0_MS = 1_800_000_000_000  # 2027-01-15, a realistic UNIX time.


def test_empty():
    w = TimingWheel(T0_MS)
    assert len(w) == 0
    assert w.next_due_ms() is None
    assert w.advance(T0_MS) == []
    assert w.advance(T0_MS + 10**9) == []
    assert w.cancel("x") is False


def test_due_in_past_or_now_comes_out_next_advance():
    w = TimingWheel(T0_MS)
    w.add("past", T0_MS - 5_000)
    w.add("now", T0_MS)
    assert w.next_due_ms() == T0_MS - 5_000
    assert w.advance(T0_MS) == ["past", "now"]
    assert len(w) == 0


def test_exact_due_within_a_tick():
    w = TimingWheel(T0_MS, tick_ms=10)
    w.add("a", T0_MS + 15)
    assert w.next_due_ms() == T0_MS + 15
    assert w.advance(T0_MS + 14) == []
    assert "a" in w
    assert w.advance(T0_MS + 15) == ["a"]
    assert "a" not in w


def test_order_by_due_then_insertion():
    w = TimingWheel(T0_MS)
    w.add("late", T0_MS + 3_000)
    w.add("tie1", T0_MS + 1_000)
    w.add("early", T0_MS + 1)
    w.add("tie2", T0_MS + 1_000)
    w.add("far", T0_MS + 86_400_000 * 400)
    assert w.advance(T0_MS + 5_000) == ["early", "tie1", "tie2", "late"]
    assert w.advance(T0_MS + 86_400_000 * 400) == ["far"]


def test_readd_replaces_due_time_and_order():
    w = TimingWheel(T0_MS)
    w.add("a", T0_MS + 100)
    w.add("b", T0_MS + 100)
    w.add("a", T0_MS + 100)  # re-added: now after b among equals
    w.add("c", T0_MS + 10**7)
    w.add("c", T0_MS + 50)
    assert len(w) == 3
    assert w.advance(T0_MS + 100) == ["c", "b", "a"]


def test_cancel():
    w = TimingWheel(T0_MS)
    for i, due_ms in enumerate([T0_MS - 1, T0_MS + 5, T0_MS + 10**6, T0_MS + 10**12]):
        w.add(i, due_ms)
    assert w.cancel(2) is True
    assert w.cancel(2) is False
    assert w.cancel(3) is True  # from the overflow
    assert w.cancel(0) is True  # from the ready list
    assert len(w) == 1
    assert w.advance(T0_MS + 10**13) == [1]


def test_overflow_beyond_top_level():
    # 2 levels of 4 slots of 1 ms span 16 ms; everything later overflows.
    w = TimingWheel(0, tick_ms=1, slots=4, levels=2)
    w.add("a", 1_000)
    w.add("b", 17)
    w.add("c", 999)
    assert w.next_due_ms() <= 17
    assert w.advance(500) == ["b"]
    assert w.advance(999) == ["c"]
    assert w.advance(999) == []
    w._check()
    assert w.advance(1_000) == ["a"]


def test_long_gap_is_cheap():
    # Jumping years ahead with 10 ms ticks must not walk every tick.
    w = TimingWheel(T0_MS)
    w.add("x", T0_MS + 3 * 365 * 86_400_000)
    w.add("y", T0_MS + 30 * 365 * 86_400_000)
    w.add("z", T0_MS + 10_000)
    assert w.advance(T0_MS + 40 * 365 * 86_400_000) == ["z", "x", "y"]


def test_next_due_is_a_lower_bound_and_eventually_exact():
    w = TimingWheel(T0_MS)
    due_ms = T0_MS + 123_456_789
    w.add("x", due_ms)
    now_ms = T0_MS
    for _ in range(10):  # each sleep lands on a cascade point, at most `levels` of them
        bound_ms = w.next_due_ms()
        assert now_ms < bound_ms <= due_ms
        if bound_ms == due_ms:
            break
        assert w.advance(bound_ms) == []
        now_ms = bound_ms
    assert w.next_due_ms() == due_ms
    assert w.advance(due_ms) == ["x"]


def test_bounded_advance_cascades_a_large_slot_over_several_calls():
    # 1,000 items in one level-1 slot: each call cascades or returns at most
    # 100, and they come out in due order.
    w = TimingWheel(T0_MS, tick_ms=10, slots=256, levels=4)
    dues = [T0_MS + 5_000 + (i * 7919) % 1000 for i in range(1000)]
    for item, due_ms in enumerate(dues):
        w.add(item, due_ms)
    got: list[int] = []
    calls = 0
    now_ms = T0_MS + 6_000
    while True:
        before = len(w)
        batch = w.advance(now_ms, 100)
        assert len(batch) <= 100
        assert len(w) == before - len(batch)
        got.extend(batch)
        calls += 1
        w._check()
        if not w.behind:
            break
        assert w.next_due_ms() is not None and w.next_due_ms() <= now_ms
    assert calls >= 20  # 10 calls of cascading, 10 of handing out
    assert got == sorted(range(1000), key=lambda i: (dues[i], i))
    assert len(w) == 0


def test_bounded_advance_keeps_items_it_holds_back_scheduled():
    w = TimingWheel(T0_MS, tick_ms=10)
    for item in range(10):
        w.add(item, T0_MS + 3_000)
    assert w.advance(T0_MS + 3_000, 4) == []  # cascading
    assert w.behind and 5 in w and len(w) == 10
    assert w.cancel(5)
    w.add(6, T0_MS + 9_000)  # moved later
    got = []
    while True:
        got.extend(w.advance(T0_MS + 3_000, 4))
        if not w.behind:
            break
        if len(got) == 4:
            assert 7 in w and w.cancel(7)  # held back in the out queue
    assert got == [0, 1, 2, 3, 4, 8, 9]
    assert w.advance(T0_MS + 9_000) == [6]


@pytest.mark.parametrize("order", ["ascending", "descending", "equal"])
def test_bounded_advance_of_one_large_finest_slot_keeps_due_order(order):
    # 500 items in one level-0 slot (one tick), added in or out of due order:
    # at most 60 a call, all of them, by (due, insertion).
    w = TimingWheel(T0_MS, tick_ms=10)
    offsets = {"ascending": lambda i: i % 10, "descending": lambda i: 9 - i % 10, "equal": lambda i: 5}[order]
    dues = [T0_MS + 50 + offsets(i * 10 // 500) for i in range(500)]
    for item, due_ms in enumerate(dues):
        w.add(item, due_ms)
    got: list[int] = []
    for now_ms in (T0_MS + 55, T0_MS + 59):  # within the slot's tick, then its end
        while True:
            batch = w.advance(now_ms, 60)
            assert len(batch) <= 60
            assert all(dues[i] <= now_ms for i in batch)
            got.extend(batch)
            w._check()
            if not w.behind:
                break
    assert got == sorted(range(500), key=lambda i: (dues[i], i))
    assert len(w) == 0


def test_time_does_not_go_backwards():
    w = TimingWheel(T0_MS)
    w.advance(T0_MS + 10)
    with pytest.raises(AssertionError):
        w.advance(T0_MS)


@pytest.mark.parametrize("slots", [0, 3, 100])
def test_slots_must_be_power_of_two(slots):
    with pytest.raises(AssertionError):
        TimingWheel(T0_MS, slots=slots)


class WheelAgainstModel(RuleBasedStateMachine):
    """The wheel must release the same items at the same advance, in the same order.

    The model is a dict item -> (due_ms, seq) plus a heap that answers
    "everything due by now" after discarding stale entries.
    """

    @initialize(
        now_ms=st.integers(0, 2**45),
        shape=st.sampled_from([(10, 256, 4), (1, 4, 2), (1, 2, 3), (7, 8, 1), (10, 16, 3)]),
    )
    def start(self, now_ms, shape):
        tick_ms, slots, levels = shape
        self.now_ms = now_ms
        self.wheel = TimingWheel(now_ms, tick_ms=tick_ms, slots=slots, levels=levels)
        self.model: dict[int, tuple[int, int]] = {}
        self.heap: list[tuple[int, int, int]] = []
        self.seq = 0

    @rule(
        item=st.integers(0, 30),
        delta_ms=st.one_of(
            st.integers(-100, 100),
            st.integers(-(10**6), 10**6),
            st.integers(0, 10**10),
            st.integers(0, 10**14),
        ),
    )
    def add(self, item, delta_ms):
        due_ms = self.now_ms + delta_ms
        self.wheel.add(item, due_ms)
        self.model[item] = (due_ms, self.seq)
        heapq.heappush(self.heap, (due_ms, self.seq, item))
        self.seq += 1

    @rule(item=st.integers(0, 30))
    def cancel(self, item):
        assert self.wheel.cancel(item) == (self.model.pop(item, None) is not None)

    @rule(
        step_ms=st.one_of(
            st.integers(0, 30),
            st.integers(0, 5_000),
            st.integers(0, 10**8),
            st.integers(0, 10**13),
        )
    )
    def advance(self, step_ms):
        self.now_ms += step_ms
        expected = []
        while self.heap and self.heap[0][0] <= self.now_ms:
            due_ms, seq, item = heapq.heappop(self.heap)
            if self.model.get(item) == (due_ms, seq):  # else stale: cancelled or re-added
                del self.model[item]
                expected.append(item)
        assert self.wheel.advance(self.now_ms) == expected

    @rule(step_ms=st.one_of(st.integers(0, 5_000), st.integers(0, 10**8)), items_max=st.integers(1, 7))
    def advance_bounded(self, step_ms, items_max):
        # A bounded advance, called again while it is behind: the same items
        # in the same order, at most items_max a call, and each call makes
        # progress (returns items or cascades some).
        self.now_ms += step_ms
        expected = []
        while self.heap and self.heap[0][0] <= self.now_ms:
            due_ms, seq, item = heapq.heappop(self.heap)
            if self.model.get(item) == (due_ms, seq):
                del self.model[item]
                expected.append(item)
        got = []
        calls = 0
        while True:
            batch = self.wheel.advance(self.now_ms, items_max)
            assert len(batch) <= items_max
            got.extend(batch)
            calls += 1
            assert calls <= len(self.wheel) + len(got) + 2 * self.wheel._levels + 2
            if not self.wheel.behind:
                break
            self.wheel._check()
        assert got == expected

    @precondition(lambda self: self.model)
    @rule()
    def advance_to_next_due(self):
        # What a driver does: sleep until next_due_ms, then advance.
        bound_ms = self.wheel.next_due_ms()
        assert bound_ms is not None
        self.advance(max(0, bound_ms - self.now_ms))

    @invariant()
    def same_contents(self):
        self.wheel._check()
        assert len(self.wheel) == len(self.model)
        for item in range(31):
            assert (item in self.wheel) == (item in self.model)
        bound_ms = self.wheel.next_due_ms()
        if not self.model:
            assert bound_ms is None
        else:
            assert bound_ms is not None
            assert bound_ms <= min(due_ms for due_ms, _ in self.model.values())


TestWheelAgainstModel = WheelAgainstModel.TestCase
TestWheelAgainstModel.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
