"""A body that is not whole JSON (or MessagePack) is malformed, at `loc`
`""`, on every endpoint that reads a body (docs/api.md "General rules"), even where
msgspec, which validates as it parses, met an unknown or wrong field before
it found the body cut short."""

import msgspec
import pytest

from .asgi_calls import call, standalone_api

RUN_ID = "r_01JEXAMPLE0000000000000000" + "0000000000"
BODY_PATHS = [
    "/v1/jobs",
    "/v1/jobs/batch",
    "/v1/schedules/preview",
    "/v1/claim",
    "/v1/heartbeats",
    "/v1/results",
    f"/v1/runs/{RUN_ID}/heartbeat",
    f"/v1/runs/{RUN_ID}/result",
    "/v1/cluster/nodes",
]
# Cut short after a field the endpoint does not know, after one it knows
# with a value of the wrong type, and inside a list of items.
TRUNCATED_JSON = [b'{"worker": ', b'{"nope": 1, "x', b'{"jobs": 5, ', b'{"jobs": [{"bad": 1}, ', b'{"attempt": "x", ']
MSGPACK = [(b"content-type", b"application/msgpack")]


@pytest.fixture
def api(tmp_path):
    with standalone_api(tmp_path / "data") as made:
        yield made


def assert_malformed(answer, what: str) -> None:
    assert answer.status == 400, what
    problem = answer.problem()
    assert problem["type"] == "validation", (what, problem)
    assert [e["loc"] for e in problem["errors"]] == [""], (what, problem)
    assert "malformed" in problem["errors"][0]["msg"], (what, problem)


@pytest.mark.parametrize("path", BODY_PATHS)
async def test_a_truncated_json_body_is_malformed_at_the_root(api, path):
    for body in TRUNCATED_JSON:
        assert_malformed(await call(api, "POST", path, [body]), f"{path} {body!r}")


@pytest.mark.parametrize("path", BODY_PATHS)
async def test_a_truncated_msgpack_body_is_malformed_at_the_root(api, path):
    for whole in ({"worker": "w", "nope": [1, 2, 3]}, {"jobs": 5, "more": "x"}):
        body = msgspec.msgpack.encode(whole)[:-1]
        assert_malformed(await call(api, "POST", path, [body], headers=MSGPACK), f"{path} {whole!r}")


@pytest.mark.parametrize("path", BODY_PATHS)
async def test_trailing_bytes_after_a_body_are_malformed(api, path):
    assert_malformed(await call(api, "POST", path, [b'{"nope": 1} x']), path)


async def test_a_whole_body_with_an_unknown_field_still_names_it(api):
    answer = await call(api, "POST", "/v1/claim", [b'{"worker": "w", "queues": ["q"], "nope": 1}'])
    assert answer.status == 400
    assert [e["loc"] for e in answer.problem()["errors"]] == ["nope"]
