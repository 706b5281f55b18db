"""`--overlap POLICY` on `tempo jobs create` and `tempo jobs update`."""

import json

from .test_cli_update import tempo


def test_create_and_update_set_the_overlap_policy(server) -> None:
    job = json.loads(tempo(
        "jobs", "create", "--target", "queue:cli", "--every-s", "60", "--overlap", "skip", "--json", url=server.url,
    ).stdout)
    assert job["overlap"] == "skip"
    changed = json.loads(tempo("jobs", "update", job["id"], "--overlap", "buffer_all", "--json", url=server.url).stdout)
    assert (changed["overlap"], changed["version"]) == ("buffer_all", 2)
    plain = json.loads(tempo("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--json", url=server.url).stdout)
    assert plain["overlap"] == "allow"


def test_a_bad_policy_names_the_flag(server) -> None:
    bad = tempo("jobs", "create", "--target", "queue:cli", "--every-s", "60", "--overlap", "sometimes",
                url=server.url, check=False)
    assert bad.returncode != 0 and "--overlap" in bad.stderr and "400" in bad.stderr
    one_off = tempo("jobs", "create", "--target", "queue:cli", "--at", "2030-01-01T00:00:00Z", "--overlap", "skip",
                    url=server.url, check=False)
    assert one_off.returncode != 0 and "--overlap" in one_off.stderr and "repeating" in one_off.stderr
