"""Reads are linearizable by default (docs/semantics.md "Reads"): a `GET`
is answered only once the node confirmed it may (`confirm_read`); one it
cannot confirm is `503` problem+json with `Retry-After`, never the node's
local state. `?stale=true` opts out, and says how far the node applied."""

from pathlib import Path

import pytest
import trio

from tempo import errors
from tempo.node import Standalone

from .asgi_calls import call, standalone_api

JOB_ID = "j_" + "0" * 26


class Deposed(Standalone):
    """A node that believes it leads, but whose reads no quorum confirms."""

    confirms = 0

    async def confirm_read(self) -> None:
        self.confirms += 1
        raise errors.NoQuorum("this node could not confirm that it still leads; retry shortly")


@pytest.mark.parametrize("path", ["/v1/jobs", f"/v1/jobs/{JOB_ID}", "/v1/runs", f"/v1/jobs/{JOB_ID}/runs",
                                  "/v1/events"])
async def test_a_read_the_node_cannot_confirm_is_503_not_its_local_state(tmp_path: Path, path: str) -> None:
    with standalone_api(tmp_path / "d") as api:
        api.node = node = Deposed(api.store.applied_index)
        with trio.fail_after(5):
            answer = await call(api, "GET", path)
        assert answer.status == 503, answer.body
        assert answer.problem()["type"] == "no_quorum"
        assert "could not confirm" in answer.problem()["detail"]
        assert answer.headers[b"retry-after"] == b"1"
        assert node.confirms == 1

        # Opted in: answered from the local state, with its applied index.
        with trio.fail_after(5):
            stale = await call(api, "GET", path + "?stale=true")
        assert stale.status in (200, 404), stale.body  # 404: no such job, as far as it knows
        if stale.status == 200:
            assert int(stale.headers[b"tempo-applied-index"]) == api.store.applied_index()
        assert node.confirms == 1


async def test_probes_and_writes_need_no_read_confirmation(tmp_path: Path) -> None:
    with standalone_api(tmp_path / "d") as api:
        api.node = node = Deposed(api.store.applied_index)
        for path in ("/healthz", "/readyz", "/v1/cluster", "/v1/openapi.json"):
            assert (await call(api, "GET", path)).status == 200, path
        assert node.confirms == 0
        # A read served normally carries no applied-index header.
        api.node = Standalone(api.store.applied_index)
        assert b"tempo-applied-index" not in (await call(api, "GET", "/v1/jobs")).headers


async def test_a_stale_404_says_how_fresh_it_is(tmp_path: Path) -> None:
    """Every stale answer carries the applied index, a 404 too: "no such job,
    as of index n" is as much a read of the node's state as a 200 is."""
    with standalone_api(tmp_path / "d") as api:
        for path in (f"/v1/jobs/{JOB_ID}", f"/v1/jobs/{JOB_ID}/runs", f"/v1/runs/r_{JOB_ID[2:]}_0"):
            answer = await call(api, "GET", path + "?stale=true")
            assert answer.status == 404, (path, answer.body)
            assert answer.problem()["type"] == "not_found"
            assert int(answer.headers[b"tempo-applied-index"]) == api.store.applied_index()
        # Without `stale`, no header: a linearizable read needs none.
        assert b"tempo-applied-index" not in (await call(api, "GET", f"/v1/jobs/{JOB_ID}")).headers


class Follower(Standalone):
    """A node that follows a known leader: it redirects what it does not serve."""

    def serves(self) -> bool:
        return False

    def redirect_url(self) -> str | None:
        return "http://leader.example:8000"


@pytest.mark.parametrize("follower", [False, True])
@pytest.mark.parametrize("query", ["stale=1", "stale=", "stale=false", "stale=1&stale=true"])
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_stale_takes_only_true(tmp_path: Path, follower: bool, query: str, method: str) -> None:
    """`stale` has one value, `true` (docs/api.md "General rules"): any other
    is 400 at `query.stale`, on the leader and on a follower (which checks it
    before it redirects), for a read and a write alike."""
    with standalone_api(tmp_path / "d") as api:
        if follower:
            api.node = Follower(api.store.applied_index)
        path = "/v1/jobs" if method == "GET" else f"/v1/jobs/{JOB_ID}/pause"
        with trio.fail_after(5):  # a write that got through would wait for a committer not running here
            answer = await call(api, method, f"{path}?{query}")
        assert answer.status == 400, answer.body
        problem = answer.problem()
        assert problem["type"] == "validation"
        assert [e["loc"] for e in problem["errors"]] == ["query.stale"], problem


@pytest.mark.parametrize("follower", [False, True])
async def test_stale_true_is_still_taken(tmp_path: Path, follower: bool) -> None:
    with standalone_api(tmp_path / "d") as api:
        if follower:
            api.node = Follower(api.store.applied_index)
        answer = await call(api, "GET", "/v1/jobs?stale=true")
        assert answer.status == 200, answer.body
        assert b"tempo-applied-index" in answer.headers
        if follower:
            # A write with `stale=true` is a write: a follower redirects it.
            answer = await call(api, "POST", f"/v1/jobs/{JOB_ID}/pause?stale=true")
            assert answer.status == 307, answer.body
