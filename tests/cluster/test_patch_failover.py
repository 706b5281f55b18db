"""A patch is replicated (docs/semantics.md "Changing a job"): after the
leader that took it is killed, the new leader has the new version, the new
settings and the re-planned waiting run."""

from .conftest import Cluster, client


def test_a_patch_survives_the_leader(make_cluster) -> None:
    cluster: Cluster = make_cluster()
    leader = cluster.wait_leader()
    with client() as http:
        job = http.post(f"{leader.url}/v1/jobs", json={
            "target": "queue:pq", "schedule": {"cron": "0 0 1 1 *"}, "name": "before",
        }).json()
        patched = http.patch(
            f"{leader.url}/v1/jobs/{job['id']}",
            json={"name": "after", "schedule": {"cron": None, "every_s": 3600}},
            headers={"content-type": "application/merge-patch+json", "if-match": '"1"'},
        )
        assert patched.status_code == 200, patched.text
        assert patched.json()["next_run_at"] != job["next_run_at"]
        leader.kill()
        new = cluster.wait_leader(among=cluster.others(leader), timeout_s=10)
        got = http.get(f"{new.url}/v1/jobs/{job['id']}")
        assert got.status_code == 200
        assert got.headers["etag"] == '"2"'
        seen = got.json()
        assert (seen["version"], seen["name"], seen["schedule"]) == (2, "after", {"every_s": 3600})
        assert seen["next_run_at"] == patched.json()["next_run_at"]
        runs = http.get(f"{new.url}/v1/jobs/{job['id']}/runs").json()["runs"]
        assert [(r["status"], r["due_at"]) for r in runs if r["status"] == "waiting"] == [
            ("waiting", patched.json()["next_run_at"])
        ]
        stale = http.patch(f"{new.url}/v1/jobs/{job['id']}", json={"name": "x"}, headers={"if-match": '"1"'})
        assert stale.status_code == 412
