"""In a batch, an item that repeats the request key of an earlier item is
a repeat of it, and gets that item's result when it was rejected, whether
the earlier item was rejected while decoding (an unknown field, a wrong
type) or by the checks after (docs/api.md "POST /v1/jobs/batch")."""

from conftest import job_body, unique


def items_of(http, jobs: list[dict]) -> list[dict]:
    answer = http.post("/v1/jobs/batch", json={"jobs": jobs})
    assert answer.status_code == 200, answer.text
    return answer.json()["results"]


def test_a_repeat_of_an_item_rejected_while_decoding_gets_its_problem(http):
    key = unique()
    bad = job_body(request_key=key, nope=1)  # an unknown field: rejected by the decoder
    good = job_body(request_key=key)
    first, second = items_of(http, [bad, good])
    assert first["status"] == 400 and [e["loc"] for e in first["problem"]["errors"]] == ["nope"]
    assert second == first
    # Nothing was created under the key: a later single create makes it.
    assert http.post("/v1/jobs", json=good).status_code == 201


def test_a_repeat_of_an_item_with_a_mistyped_field_gets_its_problem(http):
    key = unique()
    bad = job_body(request_key=key, lease_s="soon")
    first, second, third = items_of(http, [bad, job_body(request_key=key), job_body(request_key=key, nope=2)])
    assert first["status"] == 400 and [e["loc"] for e in first["problem"]["errors"]] == ["lease_s"]
    assert second == first and third == first


def test_a_repeat_of_an_item_rejected_by_the_checks_gets_its_problem(http):
    key = unique()
    first, second = items_of(http, [job_body(request_key=key, target="ftp://x"), job_body(request_key=key)])
    assert first["status"] == 400 and second == first


def test_items_with_other_keys_or_none_are_not_touched(http):
    key = unique()
    bad = job_body(request_key=key, nope=1)
    other = job_body(request_key=unique())
    results = items_of(http, [bad, other, job_body(), job_body(request_key=key)])
    assert [r["status"] for r in results] == [400, 201, 201, 400]


def test_a_valid_item_then_a_bad_repeat_keeps_the_bad_items_own_problem(http):
    key = unique()
    good = job_body(request_key=key)
    first, second = items_of(http, [good, job_body(request_key=key, nope=1)])
    assert first["status"] == 201
    # As a single create would answer it: the body is checked before its key.
    assert second["status"] == 400 and [e["loc"] for e in second["problem"]["errors"]] == ["nope"]


def test_a_repeat_follows_the_first_item_of_its_key_not_a_later_rejected_one(http):
    key = unique()
    good = job_body(request_key=key)
    results = items_of(http, [good, job_body(request_key=key, target="ftp://x"), job_body(request_key=key, nope=1), good])
    assert [r["status"] for r in results] == [201, 400, 400, 200]
    assert results[3]["job"]["id"] == results[0]["job"]["id"]
