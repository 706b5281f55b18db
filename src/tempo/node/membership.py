"""Replacing a node: one voter at a time (docs/operations.md "Replacing a node").

Raft's configuration holds voters by number; where each is reached is the
replicated `SetMember` command. Adding a node records its URL first (so the
leader can send it the snapshot), then adds the voter; removing one drops the
voter first, then its URL. Each step is committed on a majority before the
next, so a crash between them leaves a member with a URL and no vote (shown as
role "unknown", harmless) and the operator repeats the command.
"""

from urllib.parse import urlsplit

from tempo import errors
from tempo.engine import SetMember
from tempo.node import ClusterMember, raft_id_of
from tempo.raft import ConfChange, ConfChangeOp


class Membership:
    def __init__(self, node: ClusterMember):
        self.node = node
        self.replica = node.replica

    async def add(self, node_id: str, url: str) -> None:
        raft_id = raft_id_of(node_id)
        clash = self.node.by_raft_id.get(raft_id)
        if clash is not None and clash.id != node_id:
            raise errors.Invalid.at("id", f"collides with node {clash.id}; pick another ID")
        if raft_id in self.replica.voters:
            raise errors.Conflict(f"{node_id} is a member already")
        # The nodes of a cluster all speak https (with [tls]) or all plain
        # http: a node reached otherwise could never be replicated to.
        scheme = urlsplit(self.node.me.url).scheme
        if urlsplit(url).scheme != scheme:
            raise errors.Invalid.at("url", f"this cluster's nodes are reached over {scheme}://")
        await self.replica.submit(SetMember(node_id, url.rstrip("/")))
        await self.replica.change_voter(ConfChange(ConfChangeOp.ADD, raft_id))

    async def remove(self, node_id: str) -> None:
        member = next((m for m in self.node.members if m.id == node_id), None)
        if member is None:
            raise errors.NotFound(f"no member {node_id}")
        if member.raft_id in self.replica.voters:
            if len(self.replica.voters) == 1:
                raise errors.Conflict("the last voter cannot be removed")
            await self.replica.change_voter(ConfChange(ConfChangeOp.REMOVE, member.raft_id))
        if member is not self.node.me:
            # A leader that removed itself steps down once the change commits;
            # the new leader records the URL's removal on the next change.
            await self.replica.submit(SetMember(node_id, ""))
