"""The replica's linearizable reads (docs/semantics.md "Reads"): ReadIndex
rounds, batched one in flight at a time; a part of `Replica`
(node/replica.py), which sets up the state it names.
"""

from collections.abc import Generator

import trio

from tempo import errors, limits
from tempo.node.steps import Phase, ReadWait, _ReadRound
from tempo.raft import (
    RawNode,
    ReadIndexDropped,
    Ready,
)


class Reads:
    """`confirm_read` and the rounds behind it."""

    # Set up by `Replica.__init__`.
    node: RawNode
    phase: Phase
    applied_index: int
    _wake: trio.Event
    _read_next: _ReadRound | None
    _read_in_flight: _ReadRound | None
    _reads_applying: list[_ReadRound]
    _read_rounds: int

    async def confirm_read(self) -> None:
        """Returns once this node's state holds every write acknowledged
        before the call, by any leader: a ReadIndex round confirmed that it
        still led when the call came (a heartbeat quorum, Raft dissertation
        §6.4, etcd's ReadOnlySafe) and it applied the commit index it had
        then. A lone voter needs no round. Raises `errors.NotLeader` if it
        stops leading first, `errors.NoQuorum` if no quorum confirms within
        `limits.read_confirm_timeout_s`: never a stale answer.

        The trio driver of `read_steps`, which decides everything: this
        waits where it says."""
        for wait in self.read_steps(trio.current_time() + limits.read_confirm_timeout_s):
            with trio.move_on_at(wait.deadline_s):
                await wait.done.wait()

    def read_steps(self, deadline_s: float) -> Generator[ReadWait, None, None]:
        """The sequence of `confirm_read` without I/O (as `steps`): it joins
        the next ReadIndex round (which the loop starts, `readies_due`, and
        ends, `steps`), hands out a `ReadWait` while the round is neither
        done nor past `deadline_s` (trio time), and returns once the read
        may be answered, or raises as `confirm_read` does. The whole-node
        simulator (tests/sim/node_cluster.py) runs the same steps on its
        own thread."""
        if self.phase is not Phase.LEADING:
            raise errors.NotLeader("this node is not the leader")
        if self.node.voters == (self.node.id,):
            return  # its own quorum: no other node can have been elected
        round_ = self._read_next
        if round_ is None:
            round_ = self._read_next = _ReadRound()
            self._wake.set()
        while not round_.done.is_set() and trio.current_time() < deadline_s:
            yield ReadWait(round_.done, deadline_s)
        if round_.failure is not None:
            raise round_.failure
        if not round_.done.is_set():
            raise errors.NoQuorum(
                f"this node could not confirm within {limits.read_confirm_timeout_s:g} s that it still leads "
                "(no majority answered); retry shortly"
            )

    def _start_read(self) -> None:
        """Starts the next ReadIndex round, if reads wait for one and none is in flight."""
        in_flight = self._read_in_flight
        if in_flight is not None and in_flight.term != self.node.term:
            # Deposed and elected again between two looks at the phase: the
            # core dropped the round with its old term.
            self._read_in_flight = None
            self._finish_read(in_flight, errors.NotLeader("this node lost leadership before it could confirm the read"))
        round_ = self._read_next
        if round_ is None or self._read_in_flight is not None:
            return
        self._read_next = None
        if self.phase is not Phase.LEADING:
            self._finish_read(round_, errors.NotLeader("this node stopped leading before it could confirm the read"))
            return
        self._read_rounds += 1
        round_.context = self._read_rounds.to_bytes(8, "big")
        round_.term = self.node.term
        try:
            self.node.read_index(round_.context)
        except ReadIndexDropped as dropped:
            self._finish_read(round_, errors.NoQuorum(f"the read could not be confirmed ({dropped}); retry shortly"))
            return
        self._read_in_flight = round_

    def _confirmed_reads(self, rd: Ready) -> None:
        """The rounds a Ready confirms wait for their index to be applied;
        those whose index is applied are done."""
        for state in rd.read_states:
            round_ = self._read_in_flight
            if round_ is not None and state.context == round_.context:
                round_.index = state.index
                self._reads_applying.append(round_)
                self._read_in_flight = None
        waiting = []
        for round_ in self._reads_applying:
            assert round_.index is not None
            if round_.index <= self.applied_index:
                self._finish_read(round_, None)
            else:
                waiting.append(round_)
        self._reads_applying = waiting

    def _fail_reads(self, failure: errors.TempoError) -> None:
        rounds = [r for r in (self._read_next, self._read_in_flight) if r is not None] + self._reads_applying
        self._read_next = self._read_in_flight = None
        self._reads_applying = []
        for round_ in rounds:
            self._finish_read(round_, failure)

    def _finish_read(self, round_: _ReadRound, failure: errors.TempoError | None) -> None:
        round_.failure = failure
        round_.done.set()
