"""A hierarchical timing wheel (Varghese & Lauck, 1987, scheme 7).

Time is integer UNIX milliseconds, quantised into ticks of ``tick_ms``. A tick
number is read as digits in base ``slots`` (a power of two): level 0 holds
items due within the current level-0 block (one slot per tick), level i holds
items whose due tick shares every digit above digit i with the current tick,
in the slot named by digit i. Items that share no such prefix go to an
overflow dict, re-examined when the current tick enters the top-level block of
the earliest overflow item.

Invariants (asserted in ``_check`` by the tests):

- an item in level i, slot s has due tick d with d >> bits*(i+1) equal to
  the current tick's, digit i of d equal to s, and for i >= 1, s greater than
  the current tick's digit i (that slot was cascaded on entry);
- a level-0 item in the current tick's slot has due_ms > now_ms;
- ``_ready`` holds items added with due_ms <= now_ms.

``advance`` jumps from one non-empty slot to the next with per-level bitmaps,
so an idle stretch of hours costs O(levels), not O(gap / tick_ms). Exact due
times are kept, so a batch is returned in (due_ms, insertion seq) order and
items due in the current, partly elapsed tick are returned exactly when due.

``advance`` may be bounded (``items_max``) so that no call does more than
about that many items' worth of work in Python: a slot whose span the
current tick enters is then cascaded over several calls (its items wait in
``_cascading``), and due items beyond the bound wait in ``_out``, in order,
for the next call; ``behind`` says that a call should follow at once. Items
in either stay scheduled (``in``, ``len``, ``cancel``, ``add``).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["TimingWheel"]

_READY = -1  # Pseudo-level of items added already due.

# What the wheel holds; `advance` hands back the items it was given.
K = TypeVar("K", bound=Hashable)


class TimingWheel(Generic[K]):
    def __init__(self, now_ms: int, *, tick_ms: int = 10, slots: int = 256, levels: int = 4):
        assert isinstance(now_ms, int) and now_ms >= 0
        assert isinstance(tick_ms, int) and tick_ms >= 1
        assert slots >= 2 and slots & (slots - 1) == 0, "slots must be a power of two"
        assert 1 <= levels <= 16
        self._tick_ms = tick_ms
        self._levels = levels
        self._bits = slots.bit_length() - 1
        self._mask = slots - 1
        self._now_ms = now_ms
        self._tick = now_ms // tick_ms
        self._seq = 0
        # item -> [due_ms, seq, level, slot]; level is _READY, 0..levels-1, or
        # levels for the overflow.
        self._entries: dict[K, list[int]] = {}
        self._slots: list[list[dict[K, None]]] = [
            [{} for _ in range(slots)] for _ in range(levels)
        ]
        # Bit s of _bitmaps[i] is set iff _slots[i][s] is non-empty.
        self._bitmaps = [0] * levels
        self._ready: dict[K, None] = {}
        self._overflow: dict[K, None] = {}
        # A lower bound of the overflow's earliest due tick (exact after each
        # re-examination; cancellation may leave it low, which is harmless).
        self._overflow_tick_min: int | None = None
        # A bounded advance's leftovers: items of a slot still to cascade
        # (all due at or after the current tick's start), and items due by
        # `_now_ms` not yet returned, in (due_ms, seq) order. An item in one
        # of them keeps the level and slot it had, whose bucket no longer
        # holds it; `_unplace` looks here first.
        self._cascading: dict[K, None] = {}
        self._out: dict[K, None] = {}
        # Per level-0 slot, the largest (due_ms, seq) placed in it since it was
        # last taken, and (a bit per slot) whether one was placed after a
        # larger one: a slot whose bit is clear is in order as it stands, and
        # one whose largest due time has come is due whole, so a large slot
        # needs neither a sort nor a filter. Cancels leave them as they were
        # (high and unordered are the safe side).
        self._last0: list[tuple[int, int]] = [(-1, -1)] * slots
        self._unsorted0 = 0

    @property
    def behind(self) -> bool:
        """A bounded advance left work: advance again (with the same or a
        later time) before sleeping."""
        return bool(self._cascading or self._out)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, item: object) -> bool:
        return item in self._entries

    def add(self, item: K, due_ms: int) -> None:
        """Schedule ``item`` at ``due_ms``, replacing an earlier due time of it."""
        assert isinstance(due_ms, int) and not isinstance(due_ms, bool)
        if item in self._entries:
            self.cancel(item)
        entry = [due_ms, self._seq, _READY, 0]
        self._seq += 1
        self._entries[item] = entry
        self._place(item, entry)

    def cancel(self, item: K) -> bool:
        """Remove ``item``; True if it was scheduled."""
        entry = self._entries.pop(item, None)
        if entry is None:
            return False
        self._unplace(item, entry)
        return True

    def _place(self, item: K, entry: list[int]) -> None:
        due_ms = entry[0]
        if due_ms <= self._now_ms:
            entry[2] = _READY
            self._ready[item] = None
            return
        due_tick = due_ms // self._tick_ms
        assert due_tick >= self._tick
        # The highest differing digit of due and current tick picks the level.
        level = max(0, ((due_tick ^ self._tick).bit_length() - 1) // self._bits)
        if level >= self._levels:
            entry[2] = self._levels
            self._overflow[item] = None
            if self._overflow_tick_min is None or due_tick < self._overflow_tick_min:
                self._overflow_tick_min = due_tick
            return
        slot = (due_tick >> (self._bits * level)) & self._mask
        entry[2] = level
        entry[3] = slot
        if level == 0:
            key = (due_ms, entry[1])
            if key > self._last0[slot]:
                self._last0[slot] = key
            else:
                self._unsorted0 |= 1 << slot
        self._slots[level][slot][item] = None
        self._bitmaps[level] |= 1 << slot

    def _unplace(self, item: K, entry: list[int]) -> None:
        if item in self._out:
            del self._out[item]
            return
        if item in self._cascading:
            del self._cascading[item]
            return
        level = entry[2]
        if level == _READY:
            del self._ready[item]
        elif level == self._levels:
            del self._overflow[item]
            if not self._overflow:
                self._overflow_tick_min = None
        else:
            bucket = self._slots[level][entry[3]]
            del bucket[item]
            if not bucket:
                self._bitmaps[level] &= ~(1 << entry[3])

    def _next_event(self) -> tuple[int, int] | None:
        """(tick, level) of the next non-empty slot, or of the overflow's turn.

        The lowest level with a non-empty slot in its current block holds the
        earliest item: every later slot of a higher level starts after that
        block ends. For level 0 the slot at the current tick counts too; for
        higher levels it is empty by the cascade invariant.
        """
        tick = self._tick
        for level in range(self._levels):
            shift = self._bits * level
            pos = ((tick >> shift) & self._mask) + (0 if level == 0 else 1)
            rest = self._bitmaps[level] >> pos
            if rest:
                slot = pos + (rest & -rest).bit_length() - 1
                block = (tick >> (shift + self._bits)) << (shift + self._bits)
                return block | (slot << shift), level
        if self._overflow_tick_min is None:
            return None
        top = self._bits * self._levels
        next_block = ((tick >> top) + 1) << top
        return max(next_block, (self._overflow_tick_min >> top) << top), self._levels

    def next_due_ms(self) -> int | None:
        """The earliest due time if it is in level 0 or ready, else a lower bound.

        None when empty. A lower bound is the start of the slot to cascade
        next; sleeping until it and advancing is always safe.
        """
        if self.behind:
            return self._now_ms
        if self._ready:
            return min(self._entries[item][0] for item in self._ready)
        event = self._next_event()
        if event is None:
            return None
        tick, level = event
        if level == 0:
            return min(self._entries[item][0] for item in self._slots[0][tick & self._mask])
        return tick * self._tick_ms

    def next_slot_ms(self) -> int | None:
        """A lower bound of the earliest due time, in O(levels): the start
        of the next non-empty slot (or of the overflow's turn), the last
        `advance` time when items are due already. None when empty.
        `next_due_ms` without its scan of a level-0 slot, which a spike's
        slot of 100,000 items makes a scan of 100,000 due times."""
        if self.behind or self._ready:
            return self._now_ms
        event = self._next_event()
        return None if event is None else event[0] * self._tick_ms

    def advance(self, now_ms: int, items_max: int | None = None) -> list[K]:
        """Remove and return every item with due_ms <= now_ms, by (due_ms, seq).

        With ``items_max``, at most that many, and at most about that many
        items cascaded: the rest is left for the next call (``behind``).
        Items a call returns are due no later than those it leaves.
        """
        assert isinstance(now_ms, int)
        assert now_ms >= self._now_ms, "time must not go backwards"
        assert items_max is None or items_max >= 1
        budget = len(self._entries) + 1 if items_max is None else items_max
        entries = self._entries
        due: list[K] = []
        if self._out:
            due = self._hand_out(budget)
            if self._out:
                return due
            budget -= len(due)
        if self._cascading:
            budget -= self._cascade_some(budget)
            if self._cascading:
                return due
        taken: list[K] = list(self._ready)
        self._ready.clear()
        if len(taken) > budget:
            reached_ms = self._now_ms  # time stands still: only ready items go out
        else:
            reached_ms, budget = self._move_to(now_ms, taken, budget)
        self._now_ms = max(self._now_ms, reached_ms)
        # Sorting by the entries compares [due_ms, seq, ...] in C.
        taken.sort(key=entries.__getitem__)
        room = max(budget, 0)
        if len(taken) > room:
            self._out = dict.fromkeys(taken[room:])
            del taken[room:]
        for item in taken:
            del entries[item]
        due.extend(taken)
        if self._out and not taken:
            due.extend(self._hand_out(room))
        return due

    def _move_to(self, now_ms: int, taken: list[K], budget: int) -> tuple[int, int]:
        """Moves the current tick to ``now_ms``'s, one non-empty slot at a
        time, adding the items due to ``taken``; stops early where
        ``budget`` runs out. Returns (the time reached, the budget left)."""
        target_tick = now_ms // self._tick_ms
        # Each round empties a level-0 slot, cascades a slot one level down,
        # or re-examines the overflow, so rounds are bounded by those moves.
        rounds_max = (len(self._entries) + 1) * (self._levels + 2) + 2
        for _ in range(rounds_max):
            event = self._next_event()
            if event is None or event[0] > target_tick:
                self._tick = target_tick
                return now_ms, budget
            tick, level = event
            self._tick = tick
            if level == 0:
                reached_ms = self._take_level0(tick, target_tick, now_ms, taken, budget)
                if reached_ms is not None:
                    return reached_ms, budget
            elif level < self._levels:
                slot = (tick >> (self._bits * level)) & self._mask
                if len(self._slots[level][slot]) > budget - len(taken):
                    self._cascading = self._take_bucket(level, slot)
                    self._now_ms = max(self._now_ms, tick * self._tick_ms - 1)
                    budget -= self._cascade_some(budget - len(taken))
                    if self._cascading:
                        return self._now_ms, budget
                else:
                    self._cascade(level, slot)
            else:
                self._reexamine_overflow()
        raise AssertionError("advance did not terminate")

    def _take_level0(
        self, tick: int, target_tick: int, now_ms: int, taken: list[K], budget: int
    ) -> int | None:
        """Adds the due items of the level-0 slot at ``tick`` to ``taken``
        (or makes the slot the out queue); the time reached when the advance
        stops here, or None when it goes on."""
        slot = tick & self._mask
        if (
            not taken
            and len(self._slots[0][slot]) > budget
            and not self._unsorted0 >> slot & 1
            and (tick < target_tick or self._last0[slot][0] <= now_ms)
        ):
            # Due whole and in order: it becomes the out queue as it
            # stands, with no work per item beyond those handed out.
            self._out = self._take_bucket(0, slot)
            self._forget0(slot)
            return (tick + 1) * self._tick_ms - 1 if tick < target_tick else now_ms
        if self._take_slot(tick, now_ms, taken):
            return now_ms
        if len(taken) > budget:
            # The slot was taken whole: time stands at its end.
            return (tick + 1) * self._tick_ms - 1
        return None

    def _hand_out(self, items_max: int) -> list[K]:
        """Up to ``items_max`` items of ``_out``, first in order first."""
        out = self._out
        entries = self._entries
        if len(out) <= items_max:
            items = list(out)
            out.clear()
        else:
            items = list(itertools.islice(out, items_max))
            for item in items:
                del out[item]
        for item in items:
            del entries[item]
        return items

    def _take_bucket(self, level: int, slot: int) -> dict[K, None]:
        """Empties a slot at once (its items keep their entries)."""
        bucket = self._slots[level][slot]
        self._slots[level][slot] = {}
        self._bitmaps[level] &= ~(1 << slot)
        return bucket

    def _cascade_some(self, items_max: int) -> int:
        """Places up to ``items_max`` items of the slot being cascaded;
        answers how many."""
        cascading = self._cascading
        count = min(len(cascading), max(items_max, 0))
        items = list(itertools.islice(cascading, count))
        for item in items:
            del cascading[item]
            entry = self._entries[item]
            self._place(item, entry)
        return count

    def _take_slot(self, tick: int, now_ms: int, due: list[K]) -> bool:
        """Move the items due by now_ms out of level-0 slot ``tick``.

        True when the slot is the target tick's, which ends the advance.
        """
        slot = tick & self._mask
        bucket = self._slots[0][slot]
        if tick < now_ms // self._tick_ms or self._last0[slot][0] <= now_ms:
            due.extend(bucket)
            bucket.clear()
        else:
            ripe = [item for item in bucket if self._entries[item][0] <= now_ms]
            for item in ripe:
                del bucket[item]
            due.extend(ripe)
        if not bucket:
            self._bitmaps[0] &= ~(1 << slot)
            self._forget0(slot)
        return tick >= now_ms // self._tick_ms

    def _forget0(self, slot: int) -> None:
        """A level-0 slot was emptied by taking it."""
        self._last0[slot] = (-1, -1)
        self._unsorted0 &= ~(1 << slot)

    def _cascade(self, level: int, slot: int) -> None:
        """Redistribute a slot whose span the current tick has just entered."""
        bucket = self._slots[level][slot]
        items = list(bucket)
        bucket.clear()
        self._bitmaps[level] &= ~(1 << slot)
        for item in items:
            entry = self._entries[item]
            self._place(item, entry)
            assert entry[2] < level, "a cascaded item must move down"

    def _reexamine_overflow(self) -> None:
        items = list(self._overflow)
        self._overflow.clear()
        self._overflow_tick_min = None
        for item in items:
            self._place(item, self._entries[item])

    def _check(self) -> None:
        """Assert the invariants in the module docstring (for tests)."""
        placed = len(self._ready) + len(self._overflow) + len(self._cascading) + len(self._out)
        assert not (self._cascading and self._out), "the cascade ends before items go out"
        for level in range(self._levels):
            shift = self._bits * level
            for slot, bucket in enumerate(self._slots[level]):
                assert bool(bucket) == bool(self._bitmaps[level] >> slot & 1)
                placed += len(bucket)
                for item in bucket:
                    assert item not in self._cascading and item not in self._out
                    due_ms, _, entry_level, entry_slot = self._entries[item]
                    due_tick = due_ms // self._tick_ms
                    assert (entry_level, entry_slot) == (level, slot)
                    assert due_tick >> (shift + self._bits) == self._tick >> (shift + self._bits)
                    assert (due_tick >> shift) & self._mask == slot
                    assert due_ms > self._now_ms
                    if level > 0:
                        assert slot > (self._tick >> shift) & self._mask
        assert placed == len(self._entries)
