"""`POST /v1/jobs/{id}/pause` with a note against a real `tempo serve`
(docs/api.md "POST /v1/jobs/{id}/pause"): the job shows who paused it, when and
why; a bad body is a problem naming its field."""

import httpx

from conftest import configured_server, job_body, tokens_config
from tempo import limits

TIME_CHARS = len("2030-01-01T00:00:00.000Z")


def _create(http: httpx.Client, **overrides) -> dict:
    answer = http.post("/v1/jobs", json=job_body(**overrides))
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_a_job_shows_no_pause_until_paused(http: httpx.Client) -> None:
    job = _create(http)
    assert job["paused"] is None
    assert http.get(f"/v1/jobs/{job['id']}").json()["paused"] is None


def test_pause_with_a_note_shows_who_when_and_why_and_resume_clears_it(http: httpx.Client) -> None:
    job = _create(http)
    answer = http.post(f"/v1/jobs/{job['id']}/pause", json={"note": "upstream outage, INC-1234"})
    assert answer.status_code == 200, answer.text
    paused = answer.json()["paused"]
    assert paused["note"] == "upstream outage, INC-1234"
    # Auth off: the anonymous principal, `default` as an admin.
    assert paused["by"] == {"owner": "default", "role": "admin"}
    assert len(paused["at"]) == TIME_CHARS and paused["at"].endswith("Z")
    assert http.get(f"/v1/jobs/{job['id']}").json()["paused"] == paused
    listed = http.get("/v1/jobs", params={"state": "paused", "limit": 1000}).json()["jobs"]
    assert [j["paused"] for j in listed if j["id"] == job["id"]] == [paused]
    resumed = http.post(f"/v1/jobs/{job['id']}/resume").json()
    assert resumed["state"] == "active" and resumed["paused"] is None


def test_pause_without_a_body_or_with_an_empty_object_still_works(http: httpx.Client) -> None:
    for body in (None, {}):
        job = _create(http)
        answer = http.post(f"/v1/jobs/{job['id']}/pause", json=body) if body is not None else http.post(
            f"/v1/jobs/{job['id']}/pause")
        assert answer.status_code == 200, answer.text
        assert answer.json()["state"] == "paused" and answer.json()["paused"]["note"] is None


def test_a_second_pause_keeps_the_first_note(http: httpx.Client) -> None:
    job = _create(http)
    first = http.post(f"/v1/jobs/{job['id']}/pause", json={"note": "first"}).json()
    second = http.post(f"/v1/jobs/{job['id']}/pause", json={"note": "second"}).json()
    assert second == first


def test_a_note_of_the_most_characters_is_kept_whole(http: httpx.Client) -> None:
    job = _create(http)
    note = "é" * limits.pause_note_chars_max
    answer = http.post(f"/v1/jobs/{job['id']}/pause", json={"note": note})
    assert answer.status_code == 200 and answer.json()["paused"]["note"] == note


def test_bad_pause_bodies_are_problems_at_their_field(http: httpx.Client) -> None:
    job = _create(http)
    cases = [
        ({"note": "x" * (limits.pause_note_chars_max + 1)}, "note"),
        ({"note": 5}, "note"),
        ({"why": "x"}, "why"),
    ]
    for body, loc in cases:
        answer = http.post(f"/v1/jobs/{job['id']}/pause", json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert [e["loc"] for e in answer.json()["errors"]] == [loc], answer.text
    not_json = http.post(f"/v1/jobs/{job['id']}/pause", content=b"{", headers={"content-type": "application/json"})
    assert not_json.status_code == 400
    assert http.get(f"/v1/jobs/{job['id']}").json()["state"] == "active", "a refused pause changes nothing"


def test_the_pause_names_the_tokens_owner_and_role(tmp_path) -> None:
    config = tokens_config({"c-acme": ("acme", "client", None), "admin": ("ops", "admin", None)})
    with configured_server(tmp_path, config) as srv:
        def client(token: str) -> httpx.Client:
            return httpx.Client(base_url=srv.url, headers={"authorization": f"Bearer {token}"}, timeout=30)

        with client("c-acme") as acme, client("admin") as admin:
            one = acme.post("/v1/jobs", json=job_body()).json()
            two = acme.post("/v1/jobs", json=job_body()).json()
            mine = acme.post(f"/v1/jobs/{one['id']}/pause", json={"note": "mine"}).json()["paused"]
            assert mine["by"] == {"owner": "acme", "role": "client"}
            theirs = admin.post(f"/v1/jobs/{two['id']}/pause", json={"note": "ops hold"}).json()["paused"]
            assert theirs["by"] == {"owner": "ops", "role": "admin"} and theirs["note"] == "ops hold"
            assert acme.get(f"/v1/jobs/{two['id']}").json()["paused"] == theirs
