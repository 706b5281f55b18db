"""`notify` in a `PATCH` (docs/api.md "Change a job"): merged as an object,
`null` back to the owner's default, checked as a create's when named, and
kept as it is when not named, even by a server whose config no longer has
a `[notify]` table."""

from pathlib import Path

import httpx

from conftest import Server, job_body

SECRET = "s" * 40
MERGE = {"content-type": "application/merge-patch+json"}


def test_notify_is_merged_reset_and_kept(tmp_path: Path) -> None:
    config = tmp_path / "tempo.toml"
    config.write_text(f'[notify]\nsecret = "{SECRET}"\n')
    srv = Server(tmp_path / "data", extra_args=("--config", str(config)))
    try:
        srv.start()
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            job = http.post("/v1/jobs", json=job_body(notify={"url": "https://h.example/a"})).json()
            path = f"/v1/jobs/{job['id']}"
            merged = http.patch(path, json={"notify": {"events": ["run.failed"]}}, headers=MERGE).json()
            assert merged["notify"] == {"url": "https://h.example/a", "events": ["run.failed"]}
            bad = http.patch(path, json={"notify": {"url": "ftp://x"}}, headers=MERGE)
            assert bad.status_code == 400 and [e["loc"] for e in bad.json()["errors"]] == ["notify.url"]
            reset = http.patch(path, json={"notify": None}, headers=MERGE).json()
            assert reset["notify"] is None and reset["version"] == 3
            again = http.patch(path, json={"notify": {"url": "https://h.example/b"}}, headers=MERGE).json()
            assert again["notify"]["url"] == "https://h.example/b" and again["version"] == 4
        srv.stop()
        config.write_text("")  # no [notify] table any more
        srv.start()
        with httpx.Client(base_url=srv.url, timeout=30) as http:
            renamed = http.patch(path, json={"name": "renamed"}, headers=MERGE)
            assert renamed.status_code == 200, renamed.text
            assert renamed.json()["notify"] == again["notify"] and renamed.json()["version"] == 5
            refused = http.patch(path, json={"notify": {"events": ["job.completed"]}}, headers=MERGE)
            assert refused.status_code == 400 and [e["loc"] for e in refused.json()["errors"]] == ["notify"]
    finally:
        srv.cleanup()
