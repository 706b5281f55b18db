"""The Python client of the HTTP API, used by the CLI, workers and loadgen.

Built on httpx. Errors come back as `ApiError` carrying the problem+json body.
"""

import os
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8700"
request_timeout_s = 30.0


class ApiError(Exception):
    def __init__(self, status: int, problem: dict[str, Any]):
        self.status = status
        self.problem = problem
        detail = problem.get("detail") or problem.get("title") or ""
        where = "; ".join(f"{e.get('loc') or 'body'}: {e.get('msg')}" for e in problem.get("errors", []))
        super().__init__(f"{status} {problem.get('type', 'error')}: {where or detail}")


def urls_from(text: str | None) -> list[str]:
    """`--url`, else `TEMPO_URL`, else the default; several are comma-separated.
    A bearer token comes from `TEMPO_TOKEN`."""
    raw = text or os.environ.get("TEMPO_URL") or DEFAULT_URL
    return [u.strip().rstrip("/") for u in raw.split(",") if u.strip()]


class Client:
    def __init__(self, urls: list[str] | str, *, timeout_s: float = request_timeout_s, token: str | None = None):
        self.urls = urls_from(urls) if isinstance(urls, str) else list(urls)
        assert self.urls
        token = token or os.environ.get("TEMPO_TOKEN")
        headers = {"authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.urls[0], timeout=timeout_s, follow_redirects=True, headers=headers)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, params: dict | None = None) -> Any:
        params = {k: v for k, v in (params or {}).items() if v is not None}
        response = self._http.request(method, path, json=body, params=params)
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"type": "error", "detail": response.text[:500]}
            raise ApiError(response.status_code, problem)
        return None if response.status_code == 204 else response.json()

    # -- jobs -------------------------------------------------------------------

    def create_job(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "/v1/jobs", body)

    def create_jobs(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.request("POST", "/v1/jobs/batch", {"jobs": bodies})["results"]

    def get_job(self, job_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/jobs/{job_id}")

    def list_jobs(self, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        return self.request("GET", "/v1/jobs", params={"limit": limit, "cursor": cursor})

    def pause_job(self, job_id: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/jobs/{job_id}/pause")

    def resume_job(self, job_id: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/jobs/{job_id}/resume")

    def delete_job(self, job_id: str) -> None:
        self.request("DELETE", f"/v1/jobs/{job_id}")

    def trigger_job(self, job_id: str) -> dict[str, Any]:
        return self.request("POST", f"/v1/jobs/{job_id}/trigger")

    def list_runs(self, job_id: str, **params: Any) -> dict[str, Any]:
        return self.request("GET", f"/v1/jobs/{job_id}/runs", params=params)

    def get_run(self, run_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/runs/{run_id}")

    def preview(self, schedule: dict[str, Any], after: str | None = None, count: int | None = None) -> list[str]:
        body: dict[str, Any] = {"schedule": schedule}
        if after is not None:
            body["after"] = after
        if count is not None:
            body["count"] = count
        return self.request("POST", "/v1/schedules/preview", body)["times"]
