"""One check of a problem+json answer (docs/api.md "Problems (errors)"), for every test that
expects one. `type_` and `loc` are keywords: two helpers that took them in
opposite orders once checked each other's arguments."""

from typing import Any

import httpx


def assert_problem(
    response: httpx.Response, status: int, *, type_: str | None = None, loc: str | None = None
) -> dict[str, Any]:
    """The answer is a problem of `status`, well formed; of type `type_` and
    naming exactly the one field `loc`, when those are given."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["status"] == status
    assert isinstance(problem["title"], str) and isinstance(problem["detail"], str)
    assert isinstance(problem["errors"], list)
    for item in problem["errors"]:
        assert set(item) == {"loc", "msg"} and isinstance(item["msg"], str) and item["msg"]
    if type_ is not None:
        assert problem["type"] == type_, problem
    if loc is not None:
        assert [e["loc"] for e in problem["errors"]] == [loc], problem
    return problem
