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
