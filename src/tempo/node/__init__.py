"""One node wired together (docs/design.md "The pieces"): the replica loop that
feeds raft and applies to the engine, and what the API needs to know about
the node's place in its cluster.

`Standalone` is a node alone (the embedded default, group commit without
raft); `ClusterMember` is a member of a raft cluster. Both answer the
questions net/ asks: may this node serve a request itself, where is the
leader, what is its view of the cluster.
"""

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from tempo import limits
from tempo.node.replica import Phase, Replica


@dataclass(frozen=True, slots=True)
class Member:
    id: str  # as on the command line: n1
    url: str  # as given in --peers: where the others and clients reach it
    raft_id: int


# A member's role as this node sees it (schema.py `ClusterNode.role`).
MemberRole = Literal["leader", "follower", "candidate", "unknown"]
_ROLE_OF_PHASE: dict[Phase, MemberRole] = {
    Phase.LEADING: "leader", Phase.ELECTED: "leader", Phase.CANDIDATE: "candidate", Phase.FOLLOWER: "follower"
}


def raft_id_of(node_id: str) -> int:
    """Raft's integer ID for a node ID: stable, the same on every node."""
    return (zlib.crc32(node_id.encode()) & 0x7FFFFFFF) or 1


@dataclass(frozen=True, slots=True)
class View:
    node: str
    leader: str | None
    term: int
    commit_index: int
    applied_index: int
    roles: list[tuple[Member, MemberRole]]


class Standalone:
    """A single node: it always leads; every entry it applied is committed."""

    node_id = "n1"
    clustered = False

    def __init__(self, applied_index: Callable[[], int]) -> None:
        self._applied_index = applied_index
        self.url = ""

    def serves(self) -> bool:
        return True

    def leader_url(self) -> str | None:
        return self.url

    def redirect_url(self) -> str | None:
        return None

    def ready(self) -> bool:
        return True

    def not_ready(self) -> str | None:
        return None

    async def confirm_read(self) -> None:
        """Nothing to confirm: no other node can lead (docs/semantics.md "Reads")."""

    def applied_index(self) -> int:
        return self._applied_index()

    def view(self) -> View:
        applied = self._applied_index()
        return View(self.node_id, self.node_id, 0, applied, applied, [(Member(self.node_id, self.url, 1), "leader")])


class ClusterMember:
    """A member of a raft cluster, as seen through its replica."""

    clustered = True

    def __init__(self, replica: Replica, me: Member, members: list[Member]):
        self.replica = replica
        self.me = me
        self.node_id = me.id
        self.founders = members
        self.refresh({})

    def refresh(self, urls: dict[str, str]) -> None:
        """Members: those of --peers, as changed since by `SetMember`
        (`urls`: node ID → URL, "" for a removed member)."""
        by_id = {m.id: m for m in self.founders}
        for node_id, url in urls.items():
            if url:
                by_id[node_id] = Member(node_id, url, raft_id_of(node_id))
            else:
                by_id.pop(node_id, None)
        by_id.setdefault(self.me.id, self.me)
        self.members = sorted(by_id.values(), key=lambda m: m.id)
        self.by_raft_id = {m.raft_id: m for m in self.members}

    def peer_urls(self) -> dict[int, str]:
        """Raft ID → URL of every other member: where to send raft messages."""
        return {m.raft_id: m.url for m in self.members if m is not self.me}

    def serves(self) -> bool:
        """Leads, with an entry of its term applied: the state is complete."""
        return self.replica.phase is Phase.LEADING

    async def confirm_read(self) -> None:
        """Returns once this node, leading, holds every write acknowledged
        before the call (a ReadIndex round, `Replica.confirm_read`); raises
        `errors.NotLeader` or `errors.NoQuorum` when it cannot confirm that."""
        await self.replica.confirm_read()

    def applied_index(self) -> int:
        return self.replica.applied_index

    def leader(self) -> Member | None:
        return self.by_raft_id.get(self.replica.leader_id)

    def leader_url(self) -> str | None:
        leader = self.leader()
        return None if leader is None else leader.url

    def redirect_url(self) -> str | None:
        """The URL of another node that leads, if one is known."""
        leader = self.leader()
        return None if leader is None or leader is self.me else leader.url

    def ready(self) -> bool:
        return self.not_ready() is None

    def not_ready(self) -> str | None:
        """Why this node is not ready, or None: it knows a leader, has at
        most `limits.follower_lag_entries_max` committed entries left to
        apply, and (a follower) is at most that many entries behind its
        leader's commit index. A few entries waiting to be applied are the
        normal state under load, not a reason to answer 503; a backlog that
        does not move is one, which `Replica.stalled` reports
        (docs/operations.md "Readiness and health")."""
        leader = self.leader()
        if leader is None:
            return "no leader known"
        if leader is self.me and not self.serves():
            return "elected; no entry of its own term applied yet"
        applied, commit = self.replica.applied_index, self.replica.commit_index
        if commit - applied > limits.follower_lag_entries_max:
            return (f"applying: applied index {applied}, commit index {commit} "
                    f"(over {limits.follower_lag_entries_max} committed entries to apply)")
        leader_commit = self.replica.leader_commit_index
        if leader is not self.me and leader_commit - applied > limits.follower_lag_entries_max:
            return (f"{leader_commit - applied} entries behind the leader {leader.id} "
                    f"(applied index {applied}, the leader's commit index {leader_commit})")
        return None

    def view(self) -> View:
        leader = self.leader()
        roles: list[tuple[Member, MemberRole]] = []
        voters = set(self.replica.voters)
        for member in self.members:
            role: MemberRole
            if member.raft_id not in voters and voters:
                role = "unknown"  # added by URL, not (or no longer) a voter
            elif member is self.me:
                role = _ROLE_OF_PHASE[self.replica.phase]
            else:
                # Another voter: the leader if this node knows it as such;
                # otherwise a follower, as far as this node can tell.
                role = "leader" if member is leader else "follower"
            roles.append((member, role))
        return View(
            self.me.id,
            None if leader is None else leader.id,
            self.replica.term,
            self.replica.commit_index,
            self.replica.applied_index,
            roles,
        )
