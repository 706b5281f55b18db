"""The cluster's configuration as the core sees it (dissertation §4.1): the
voters of every config entry in the log after the snapshot, the last one
in force; a part of `RawNode` (_core.py), which sets up the state it names.
"""

from __future__ import annotations

from . import limits
from ._log import RaftLog
from ._progress import Progress
from .types import (
    CONF_CHANGE_DECODER,
    ConfChangeOp,
    Entry,
    EntryKind,
    Role,
)


class Configuration:
    """The voters in force and their history in the log."""

    # Set up by `RawNode.__init__`.
    id: int
    log: RaftLog
    role: Role
    progress: dict[int, Progress]
    _conf_history: list[tuple[int, tuple[int, ...]]]

    @property
    def voters(self) -> tuple[int, ...]:
        return self._conf_history[-1][1]

    @property
    def conf_index(self) -> int:
        """Index of the config entry in force (the snapshot's if none since)."""
        return self._conf_history[-1][0]

    def _scan_conf(self, lo: int, hi: int) -> None:
        while lo < hi:
            batch = self.log.slice(lo, min(hi, lo + limits.ENTRIES_PER_MESSAGE_MAX), 1 << 62)
            self._apply_conf_entries(lo, batch)
            lo += len(batch)

    def _apply_conf_entries(self, first_index: int, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.kind != EntryKind.CONF_CHANGE:
                continue
            change = CONF_CHANGE_DECODER.decode(entry.data)
            voters = set(self.voters)
            if change.op == ConfChangeOp.ADD:
                voters.add(change.node_id)
            else:
                voters.discard(change.node_id)
            self._conf_history.append((entry.index, tuple(sorted(voters))))
            if self.role == Role.LEADER:
                self._sync_progress()

    def _sync_progress(self) -> None:
        voters = self.voters
        for peer in list(self.progress):
            if peer not in voters:
                del self.progress[peer]
        next_index = self.log.last_index() + 1
        for voter in voters:
            if voter != self.id and voter not in self.progress:
                self.progress[voter] = Progress(next_index)

    def _truncate_conf(self, first_index: int) -> None:
        history = self._conf_history
        while len(history) > 1 and history[-1][0] >= first_index:
            history.pop()
        assert history[-1][0] < first_index or len(history) == 1

    def _conf_at(self, index: int) -> tuple[int, ...]:
        for conf_index, voters in reversed(self._conf_history):
            if conf_index <= index:
                return voters
        raise AssertionError("no config at or below index")

    def _trim_conf_history(self, index: int) -> None:
        voters = self._conf_at(index)
        newer = [(i, v) for i, v in self._conf_history if i > index]
        self._conf_history = [(index, voters), *newer]
