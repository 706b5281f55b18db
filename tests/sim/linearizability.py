"""A small Wing–Gong linearizability checker (with Lowe's memoization).

A history is a list of Ops with invocation and response times (response None:
still pending, so it may take effect at any point after its invocation, or
never). A model gives the initial state and `step(state, op)`, returning the
new state or None if the op cannot happen there. The search is depth-first
over which operation to linearize next, remembering visited (linearized set,
state) pairs; a read that fits the current state is placed at once, without
branching (reads commute and never change the state).

Two models: SetModel (add(v), read() -> frozenset) for small histories, and
LogModel for the simulator. In LogModel an add carries the position its value
got in the replicated log, and a read returns how many values it saw; since
state machine safety is checked separately, every replica's state is a prefix
of that one sequence, so this is the set model with adds forced into log order,
which keeps the search linear instead of exponential in concurrent adds.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

INFINITY = float("inf")
STATES_MAX = 1_000_000


@dataclasses.dataclass
class Op:
    kind: str  # "add" or "read"
    value: object  # add: the value (SetModel) or log position (LogModel); read: result
    invoke_at: float
    response_at: float | None = None


class Model(Protocol):
    def init(self) -> object: ...

    def step(self, state: object, op: Op) -> object | None: ...


class SetModel:
    def init(self) -> frozenset:
        return frozenset()

    def step(self, state: frozenset, op: Op) -> frozenset | None:
        if op.kind == "add":
            return state | {op.value}
        return state if state == op.value else None


class LogModel:
    def init(self) -> int:
        return 0

    def step(self, state: int, op: Op) -> int | None:
        if op.kind == "add":
            return state + 1 if op.value == state + 1 else None
        return state if state == op.value else None


class CheckerBudgetExceeded(Exception):
    pass


def check(ops: list[Op], model: Model) -> tuple[bool, str]:
    """True if the history is linearizable; otherwise a short reason."""
    ops = sorted(ops, key=lambda op: op.invoke_at)
    n = len(ops)
    responses = [INFINITY if op.response_at is None else op.response_at for op in ops]
    must = sum(1 << k for k, op in enumerate(ops) if op.response_at is not None)
    visited: set[tuple[int, object]] = set()
    stack: list[tuple[int, object]] = [(0, model.init())]
    placed_max = 0
    while stack:
        done, state = stack.pop()
        if done & must == must:
            return True, ""
        if (done, state) in visited:
            continue
        visited.add((done, state))
        if len(visited) > STATES_MAX:
            raise CheckerBudgetExceeded(f"{n} ops")
        placed_max = max(placed_max, (done & must).bit_count())
        # Only an op invoked before every remaining op's response may go next.
        horizon = min((responses[k] for k in range(n) if not done >> k & 1), default=INFINITY)
        successors = []
        for k in range(n):
            op = ops[k]
            if op.invoke_at > horizon:
                break
            if done >> k & 1:
                continue
            after = model.step(state, op)
            if after is None:
                continue
            if op.kind == "read":
                # A read that fits now goes now, without branching: adds only
                # ever change the state, so a read placed later at this same
                # state has only reads between, and it was invoked before
                # all their responses (it is below the horizon).
                successors = [(done | 1 << k, after)]
                break
            successors.append((done | 1 << k, after))
        stack.extend(successors)
    return False, f"no linearization: at most {placed_max} of {must.bit_count()} completed ops placed"
