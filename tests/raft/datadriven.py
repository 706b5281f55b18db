"""Golden transcripts of the raft core, in the manner of etcd's datadriven
tests (raft/testdata/*.txt): a scenario file holds commands, each followed
by `----` and the output it gave, closed by a blank line. The test replays
the commands on a fresh `transcript.Cluster` and compares every output;
`pytest --rewrite` writes the outputs back into the files instead, so a
change in behaviour shows in review as a change of the file.

Commands (node IDs are numbers; every command prints the messages the
nodes sent while it ran, then the changes of role, term, leader and commit
it caused, then the entries applied, or `ok` when nothing happened):

    cluster 3 [pre_vote=false] [check_quorum=false]   a fresh cluster
    campaign 1                                         node 1 campaigns
    propose 1 data                                     node 1 proposes b"data"
                                                       (a refusal prints `error: ...`)
    tick 2 10                                          node 2 ticks 10 times
    deliver [src=1] [dst=2]                            deliver until quiet
    drop [src=1] [dst=2]                               lose pending messages
    isolate 1 | heal                                   cut node 1 off, or mend
    status                                             every node's state
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tempo.raft import Entry, EntryKind, Message, RaftError, Role

from .transcript import Cluster

SEPARATOR = "----"


@dataclass
class Case:
    """One command of a scenario: its line (1-based), text and expected output."""

    line: int
    command: str
    expected: str


def parse(text: str) -> tuple[list[str], list[Case]]:
    """The file's lines before each case (comments, blank lines) and its
    cases; `render(parse(text))` gives `text` back when the outputs hold."""
    lines = text.splitlines()
    preambles: list[str] = []
    cases: list[Case] = []
    pending: list[str] = []
    k = 0
    while k < len(lines):
        line = lines[k]
        if not line.strip() or line.startswith("#"):
            pending.append(line)
            k += 1
            continue
        if k + 1 >= len(lines) or lines[k + 1] != SEPARATOR:
            raise ValueError(f"line {k + 1}: {line!r} is not followed by {SEPARATOR!r}")
        end = k + 2
        while end < len(lines) and lines[end].strip():
            end += 1
        cases.append(Case(k + 1, line, "\n".join(lines[k + 2 : end])))
        preambles.append("\n".join(pending))
        pending = []
        k = end + 1  # the blank line that closes the output
    preambles.append("\n".join(pending))
    return preambles, cases


def render(preambles: list[str], cases: list[Case], outputs: list[str]) -> str:
    parts: list[str] = []
    for preamble, case, output in zip(preambles, cases, outputs, strict=False):
        if preamble:
            parts.append(preamble)
        parts.append(f"{case.command}\n{SEPARATOR}\n{output}\n")
    if preambles[-1].strip():
        parts.append(preambles[-1])
    return "\n".join(parts).rstrip("\n") + "\n"


def _message(m: Message) -> str:
    fields = []
    for name in m.__struct_fields__:
        if name in ("src", "dst"):
            continue
        value = getattr(m, name)
        if name == "entries":
            value = "[" + " ".join(_entry(e) for e in value) + "]"
        elif isinstance(value, bytes):
            value = value.decode(errors="replace") or '""'
        fields.append(f"{name}={value}")
    return f"{m.src}->{m.dst} {type(m).__name__} " + " ".join(fields)


def _entry(e: Entry) -> str:
    data = e.data.decode(errors="replace") if e.kind == EntryKind.NORMAL else EntryKind(e.kind).name.lower()
    return f"{e.index}/{e.term}:{data}"


class Runner:
    """Replays the commands of one scenario."""

    def __init__(self) -> None:
        self.cluster: Cluster | None = None

    def _state(self) -> dict[int, tuple[str, int, int, int]]:
        assert self.cluster is not None
        return {
            i: (Role(n.role).name.lower(), n.term, n.leader_id, n.log.committed)
            for i, n in sorted(self.cluster.nodes.items())
        }

    def run(self, command: str) -> str:
        name, *words = command.split()
        args = [w for w in words if "=" not in w]
        options = dict(w.split("=", 1) for w in words if "=" in w)
        if name == "cluster":
            self.cluster = Cluster(
                int(args[0]),
                pre_vote=options.get("pre_vote", "true") == "true",
                check_quorum=options.get("check_quorum", "true") == "true",
            )
            return self.status()
        assert self.cluster is not None, "the first command makes the cluster"
        if name == "status":
            return self.status()
        c = self.cluster
        sent, state = len(c.sent), self._state()
        applied = {i: len(entries) for i, entries in c.applied.items()}
        try:
            self._action(name, args, options)()
            refused = []
        except RaftError as exc:  # the core's answer to a caller, part of the transcript
            refused = [f"error: {type(exc).__name__}: {exc}"]
        out = [*refused, *(_message(m) for m in c.sent[sent:])]
        after = self._state()
        for i, old in state.items():
            new = after.get(i, old)
            changes = [
                f"{label} {a} -> {b}"
                for label, a, b in zip(("role", "term", "leader", "commit"), old, new, strict=True)
                if a != b
            ]
            if changes:
                out.append(f"{i}: " + ", ".join(changes))
        for i, entries in sorted(c.applied.items()):
            if len(entries) > applied.get(i, 0):
                out.append(f"{i} applied " + " ".join(_entry(e) for e in entries[applied.get(i, 0) :]))
        return "\n".join(out) or "ok"

    def _action(self, name: str, args: list[str], options: dict[str, str]) -> Callable[[], object]:
        c = self.cluster
        assert c is not None
        where = {key: int(options[key]) for key in ("src", "dst") if key in options}
        actions: dict[str, Callable[[], object]] = {
            "campaign": lambda: c.campaign(int(args[0])),
            "propose": lambda: c.propose(int(args[0]), args[1].encode()),
            "tick": lambda: c.tick(int(args[0]), int(args[1]) if len(args) > 1 else 1),
            "deliver": lambda: c.deliver(**where),
            "drop": lambda: c.drop(**where),
            "isolate": lambda: c.isolate(int(args[0])),
            "heal": c.heal,
        }
        if name not in actions:
            raise ValueError(f"unknown command {name!r}")
        return actions[name]

    def status(self) -> str:
        assert self.cluster is not None
        lines = []
        for i, (role, term, leader, commit) in self._state().items():
            last = self.cluster.nodes[i].log.last_index()
            lines.append(f"{i}: {role} term={term} leader={leader} commit={commit} last={last}")
        return "\n".join(lines)


def replay(path: Path) -> tuple[str, str]:
    """(the file's text, the text its commands give now)."""
    text = path.read_text()
    preambles, cases = parse(text)
    runner = Runner()
    outputs = [runner.run(case.command) for case in cases]
    return text, render(preambles, cases, outputs)
