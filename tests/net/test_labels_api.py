"""Job labels against a real `tempo serve` (docs/api.md "Labels", "Listing
jobs"): stored with the job and shown in its view, merged key by key by a
patch, refused at the field that is wrong, and `GET /v1/jobs?label=k:v`
filtering by one or more of them together with the other filters and pages."""

import httpx
import pytest

from conftest import job_body, unique
from tempo import limits


def _create(http: httpx.Client, **fields) -> dict:
    answer = http.post("/v1/jobs", json=job_body(**fields))
    assert answer.status_code == 201, answer.text
    return answer.json()


def _patch(http: httpx.Client, job_id: str, patch: dict) -> httpx.Response:
    return http.patch(f"/v1/jobs/{job_id}", json=patch, headers={"content-type": "application/merge-patch+json"})


def _locs(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 400, answer.text
    return [e["loc"] for e in answer.json()["errors"]]


def _listed(http: httpx.Client, **params) -> list[str]:
    """Every page of `GET /v1/jobs` with `params`, followed by its cursor."""
    ids: list[str] = []
    cursor = None
    while True:
        query = [(k, v) for k, values in params.items() for v in (values if isinstance(values, list) else [values])]
        if cursor is not None:
            query.append(("cursor", cursor))
        page = http.get("/v1/jobs", params=query)
        assert page.status_code == 200, page.text
        ids += [j["id"] for j in page.json()["jobs"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            return ids


def test_a_job_shows_its_labels_sorted_and_none_as_an_empty_object(http: httpx.Client) -> None:
    job = _create(http, labels={"team": "payments", "env": "prod", "a/b.c_d-e": ""})
    assert list(job["labels"].items()) == [("a/b.c_d-e", ""), ("env", "prod"), ("team", "payments")]
    assert http.get(f"/v1/jobs/{job['id']}").json()["labels"] == job["labels"]
    assert _create(http)["labels"] == {}
    assert _create(http, labels={})["labels"] == {}


def test_labels_at_their_bounds_are_taken(http: httpx.Client) -> None:
    labels = {f"k{n:02d}" + "x" * (limits.label_key_chars_max - 3): "é" * limits.label_value_chars_max
              for n in range(limits.job_labels_max)}
    assert _create(http, labels=labels)["labels"] == labels


@pytest.mark.parametrize(("labels", "loc"), [
    ({f"k{n}": "v" for n in range(limits.job_labels_max + 1)}, "labels"),
    ({"Team": "payments"}, "labels"),
    ({"team name": "payments"}, "labels"),
    ({"": "payments"}, "labels"),
    ({"k" * (limits.label_key_chars_max + 1): "v"}, "labels"),
    ({"team\n": "payments"}, "labels"),
    ({"team": "v" * (limits.label_value_chars_max + 1)}, "labels.team"),
    ({"team": 7}, "labels.team"),
    ({"team": None}, "labels.team"),
    ({"team": {"nested": "x"}}, "labels.team"),
])
def test_a_bad_label_is_400_at_its_field(http: httpx.Client, labels: dict, loc: str) -> None:
    assert _locs(http.post("/v1/jobs", json=job_body(labels=labels))) == [loc]
    batch = http.post("/v1/jobs/batch", json={"jobs": [job_body(labels=labels)]})
    [result] = batch.json()["results"]
    assert result["status"] == 400 and [e["loc"] for e in result["problem"]["errors"]] == [loc]


def test_labels_are_part_of_a_request_keys_body(http: httpx.Client) -> None:
    body = job_body(request_key=unique("labels"))
    first = http.post("/v1/jobs", json=body | {"labels": {"b": "2", "a": "1"}})
    assert first.status_code == 201
    again = http.post("/v1/jobs", json=body | {"labels": {"a": "1", "b": "2"}})
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    other = http.post("/v1/jobs", json=body | {"labels": {"a": "1"}})
    assert other.status_code == 409 and other.json()["type"] == "request_key_reused"


def test_a_patch_merges_labels_key_by_key(http: httpx.Client) -> None:
    job = _create(http, labels={"team": "payments", "env": "prod"})
    changed = _patch(http, job["id"], {"labels": {"team": None, "tier": "gold"}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["labels"] == {"env": "prod", "tier": "gold"} and changed.json()["version"] == 2
    same = _patch(http, job["id"], {"labels": {"env": "prod"}})
    assert same.json()["version"] == 2  # nothing changed: no new version
    cleared = _patch(http, job["id"], {"labels": None})
    assert cleared.json()["labels"] == {} and cleared.json()["version"] == 3
    assert _locs(_patch(http, job["id"], {"labels": {"Bad": "x"}})) == ["labels"]
    assert _locs(_patch(http, job["id"], {"labels": {"team": "v" * 257}})) == ["labels.team"]
    assert http.get(f"/v1/jobs/{job['id']}").json()["version"] == 3


def test_a_patch_past_32_labels_is_400_and_changes_nothing(http: httpx.Client) -> None:
    job = _create(http, labels={f"k{n}": "v" for n in range(limits.job_labels_max)})
    assert _locs(_patch(http, job["id"], {"labels": {"one-more": "v"}})) == ["labels"]
    swapped = _patch(http, job["id"], {"labels": {"k0": None, "one-more": "v"}})
    assert swapped.status_code == 200 and "one-more" in swapped.json()["labels"]


def test_the_label_filter_ands_its_labels_and_follows_the_other_filters(http: httpx.Client) -> None:
    team = unique("team").lower()
    a = _create(http, name="nightly-a", labels={"team": team, "env": "prod"})
    b = _create(http, name="nightly-b", target="queue:other", labels={"team": team})
    c = _create(http, name="weekly-c", labels={"team": team, "env": "dev"})
    _create(http, labels={"team": team + "-not"})
    http.post(f"/v1/jobs/{c['id']}/pause")
    assert _listed(http, label=f"team:{team}") == [c["id"], b["id"], a["id"]]
    assert _listed(http, label=[f"team:{team}", "env:prod"]) == [a["id"]]
    assert _listed(http, label=["env:prod", f"team:{team}"]) == [a["id"]]
    assert _listed(http, label=[f"team:{team}", "env:staging"]) == []
    assert _listed(http, label=[f"team:{team}", f"team:{team}"]) == [c["id"], b["id"], a["id"]]
    assert _listed(http, label=[f"team:{team}", f"team:{team}-not"]) == []
    assert _listed(http, label=f"team:{team}", state="paused") == [c["id"]]
    assert _listed(http, label=f"team:{team}", target="queue:other") == [b["id"]]
    assert _listed(http, label=f"team:{team}", name_prefix="nightly-") == [b["id"], a["id"]]
    # One to a page: the cursor goes on in the index.
    assert _listed(http, label=f"team:{team}", limit="1") == [c["id"], b["id"], a["id"]]


def test_a_label_filter_sees_patches_and_deletes(http: httpx.Client) -> None:
    team = unique("team").lower()
    job = _create(http, labels={"team": team})
    assert _listed(http, label=f"team:{team}") == [job["id"]]
    _patch(http, job["id"], {"labels": {"team": team + "-moved"}})
    assert _listed(http, label=f"team:{team}") == []
    assert _listed(http, label=f"team:{team}-moved") == [job["id"]]
    assert http.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert _listed(http, label=f"team:{team}-moved") == []


def test_a_value_may_hold_colons_and_any_character(http: httpx.Client) -> None:
    value = "https://x:8080/é " + unique()
    job = _create(http, labels={"url": value})
    assert _listed(http, label=f"url:{value}") == [job["id"]]
    empty = _create(http, labels={"flag" + unique().lower()[-8:]: ""})
    [key] = empty["labels"]
    assert _listed(http, label=f"{key}:") == [empty["id"]]


@pytest.mark.parametrize("value", [
    "team", "Team:payments", ":payments", "team name:x", "k" * 64 + ":v", "team:" + "v" * 257, "team\n:x",
])
def test_a_malformed_label_filter_is_400_at_query_label(http: httpx.Client, value: str) -> None:
    answer = http.get("/v1/jobs", params={"label": value})
    assert _locs(answer) == ["query.label"]


def test_more_label_filters_than_a_job_has_labels_is_400(http: httpx.Client) -> None:
    params = [("label", f"k{n}:v") for n in range(limits.job_labels_max + 1)]
    assert _locs(http.get("/v1/jobs", params=params)) == ["query.label"]


def test_a_binary_label_value_in_messagepack_is_400(http: httpx.Client) -> None:
    import msgspec

    headers = {"content-type": "application/msgpack"}
    body = msgspec.msgpack.encode(job_body(labels={"team": b"\x00\x01"}))
    assert _locs(http.post("/v1/jobs", content=body, headers=headers)) == ["labels.team"]
    job = _create(http, labels={"team": "payments"})
    patch = msgspec.msgpack.encode({"labels": {"team": b"\x00\x01"}})
    assert _locs(http.patch(f"/v1/jobs/{job['id']}", content=patch, headers=headers)) == ["labels"]
    kept = msgspec.msgpack.encode({"labels": {"team": "search"}})
    answer = http.patch(f"/v1/jobs/{job['id']}", content=kept, headers=headers | {"accept": "application/json"})
    assert answer.status_code == 200 and answer.json()["labels"] == {"team": "search"}
