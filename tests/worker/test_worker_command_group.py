"""`tempo worker`'s command handler stops the whole command when its run
ends early (a timeout, a cancel, a lost lease): what a shell script started
gets the signals too, rather than living on after the run has ended
(docs/operations.md "`tempo worker`")."""

import os
from pathlib import Path

import trio

from tempo.worker import command_handler

EVENTUALLY_S = 20.0


def _gone(pid: int) -> bool:
    """The process has exited (a zombie not yet reaped counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # ESRCH: it exited while the file was read
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _text(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


async def _until(path: Path) -> str:
    with trio.fail_after(EVENTUALLY_S):
        while not (text := _text(path)):
            await trio.sleep(0.02)
    return text


async def test_a_cancelled_command_takes_its_children_with_it(tmp_path: Path) -> None:
    child = tmp_path / "child"
    # The shell starts a child and waits for it, as a script's last command does.
    handler = command_handler(["sh", "-c", f"sleep 300 & echo $! > {child}; wait"])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(handler, {"id": "r_1", "attempt": 1, "job_id": "j_1", "payload": None})
        pid = int(await _until(child))
        assert not _gone(pid)
        nursery.cancel_scope.cancel()
    with trio.fail_after(EVENTUALLY_S):
        while not _gone(pid):
            await trio.sleep(0.02)


async def test_the_command_has_a_session_of_its_own(tmp_path: Path) -> None:
    """Its own process group: a terminal's Ctrl-C goes to the worker only,
    which gives commands their grace (`--grace-s`) rather than losing them
    at once."""
    handler = command_handler(["sh", "-c", "ps -o sid= -p $$"])
    output = await handler({"id": "r_1", "attempt": 1, "job_id": "j_1", "payload": None})
    assert output is not None and int(output.strip()) != os.getsid(0)
