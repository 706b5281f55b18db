"""The long polls of workers' signals that wait on the leader (docs/api.md
"Signals"), by the runs they name: a run asked to stop, or whose timeout
ended its attempt, wakes the polls that name it and no other, so a cancel
reaches its worker at once without any loop polling on the server."""

import trio

# A run as the dispatcher keys it: (job ID, nominal ms).
Slot = tuple[str, int]


class StopWaiters:
    """Each waiting poll is one event, entered under every run it names;
    `wake` sets the events of the runs named and forgets them. A poll
    takes its event out again when its wait ends, so nothing outlives it."""

    def __init__(self) -> None:
        self._by_slot: dict[Slot, set[trio.Event]] = {}

    def add(self, slots: list[Slot], event: trio.Event) -> None:
        for slot in slots:
            self._by_slot.setdefault(slot, set()).add(event)

    def discard(self, slots: list[Slot], event: trio.Event) -> None:
        for slot in slots:
            waiting = self._by_slot.get(slot)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._by_slot[slot]

    def wake(self, slots: list[Slot]) -> None:
        """The runs `slots` are to stop: the polls naming them answer."""
        if not self._by_slot:
            return  # the common case: nobody waits, nothing to look up
        for slot in slots:
            for event in self._by_slot.pop(slot, ()):
                event.set()

    def wake_all(self) -> None:
        """This node stopped leading: every poll looks again (and fails)."""
        for waiting in self._by_slot.values():
            for event in waiting:
                event.set()
        self._by_slot = {}

    def __len__(self) -> int:
        """Runs some poll waits on."""
        return len(self._by_slot)
