"""The dependency flags of `tempo jobs create` and `tempo jobs update`
(docs/semantics.md "Dependencies", "A gate on a clock schedule"):
`--after` and `--requires` name the parents; `--on`, `--any`, `--all`,
`--within-s` and `--wait-s` say how their ends count. A flag that would
change nothing is refused, naming it, rather than dropped: each goes
only with the kind of edges it shapes, given on the same command line,
or, on `jobs update`, the job's own edges, which it changes alone."""

import argparse
from collections.abc import Callable
from typing import Any

# Each flag that shapes edges: its attribute, its name, the edges it goes
# with (`after`, `requires`), what it does, and its argparse options.
# `add_flags` starts each help with the edges, so the help says what
# `check` enforces.
SHAPING: tuple[tuple[str, str, tuple[str, ...], str, dict[str, Any]], ...] = (
    ("on", "--on", ("after", "requires"),
     "which end of a parent's run counts (default succeeded; failed: failed for good, after its last "
     "attempt); on jobs update alone, it changes the job's own edges",
     {"choices": ("succeeded", "failed", "finished")}),
    ("any", "--any", ("after",),
     "one run for each counting end of any parent (default: one run once every parent ended)",
     {"action": "store_true"}),
    ("all_parents", "--all", ("after",),
     "one run once every parent ended (the default; on jobs update, back from --any)",
     {"action": "store_true"}),
    ("within_s", "--within-s", ("after", "requires"),
     "a parent's end counts only if it is at most S seconds old: with --after, when the last parent's "
     "end arrives; with --requires, at the slot",
     {"type": int, "metavar": "S"}),
    ("wait_s", "--wait-s", ("requires",),
     "a slot waits up to S seconds for the missing ends, then is skipped (default 0)",
     {"type": int, "metavar": "S"}),
)
_NEEDS = {("after",): "--after", ("requires",): "--requires", ("after", "requires"): "--after or --requires"}
# --any and --all choose between the same two ways, so one excludes the other.
_EITHER = ("any", "all_parents")


class DepsUsage(Exception):
    """A command line that cannot be sent (the caller exits 2)."""


def add_flags(group: argparse._ArgumentGroup) -> None:
    """`--requires` and the flags that shape edges, beside `--after`
    (which is one of the schedule's kinds)."""
    group.add_argument("--requires", dest="requires_jobs", metavar="IDS",
                       help="with --cron or --every-s: a slot runs only if these jobs ended (as --on says) "
                            "before it, e.g. j_load")
    either = group.add_mutually_exclusive_group()
    for attr, flag, kinds, does, options in SHAPING:
        into = either if attr in _EITHER else group
        into.add_argument(flag, dest=attr, help=f"with {_NEEDS[kinds]}: {does}", **options)


def _given(args: argparse.Namespace, attr: str) -> bool:
    value = getattr(args, attr, None)
    return value is not None and value is not False


def shaping_given(args: argparse.Namespace) -> bool:
    return any(_given(args, attr) for attr, *_ in SHAPING)


def _kind_given(args: argparse.Namespace) -> str | None:
    """The edges the command line names: `after` or `requires`, or None."""
    if getattr(args, "after_jobs", None) is not None:
        return "after"
    return "requires" if getattr(args, "requires_jobs", None) is not None else None


def check(args: argparse.Namespace, kind: str | None, why: str = "") -> None:
    """Refuses a shaping flag that does not go with `kind`, the edges it
    would shape (None: there are none), naming the flag."""
    for attr, flag, kinds, *_ in SHAPING:
        if _given(args, attr) and kind not in kinds:
            raise DepsUsage(f"{flag}: only with {_NEEDS[kinds]}{why}")


def _jobs(text: str) -> list[str]:
    return [one.strip() for one in text.split(",") if one.strip()]


def _shape(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """The keys of `kind`'s edges the shaping flags set."""
    shape: dict[str, Any] = {}
    for attr, _, kinds, *_ in SHAPING:
        if kind in kinds and _given(args, attr):
            if attr == "any":
                shape["all"] = False
            elif attr == "all_parents":
                shape["all"] = True
            else:
                shape[attr] = getattr(args, attr)
    return shape


def after_value(args: argparse.Namespace) -> dict[str, Any] | None:
    """`schedule.after` from --after and its flags; None without --after."""
    value = getattr(args, "after_jobs", None)
    if value is None:
        return None
    check(args, "after")
    return {"jobs": _jobs(value)} | _shape(args, "after")


def requires_field(args: argparse.Namespace) -> dict[str, Any]:
    """`schedule.requires` from --requires and its flags, for a create;
    any shaping flag without --after or --requires is refused."""
    kind = _kind_given(args)
    check(args, kind)
    value = getattr(args, "requires_jobs", None)
    if value is None:
        return {}
    return {"requires": {"jobs": _jobs(value)} | _shape(args, "requires")}


def patch_fields(args: argparse.Namespace, job_schedule: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The edges' part of `jobs update`'s schedule patch, beside `after`
    (which the kind flags set). With --after or --requires, as a create
    has them; with shaping flags alone, they change the job's own edges
    (read with `job_schedule`), key by key: `--on failed` alone keeps
    the parents and the rest."""
    kind = _kind_given(args)
    if kind is not None:
        return requires_field(args) if kind == "requires" else {}
    if not shaping_given(args):
        return {}
    current = job_schedule()
    own = "after" if current.get("after") is not None else "requires" if current.get("requires") is not None else None
    if own is None:
        check(args, None, ", and the job has no edges to change")
    else:
        check(args, own, f" (the job has {own} edges)")
    assert own is not None
    return {own: _shape(args, own)}
