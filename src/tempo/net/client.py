"""The Python client of the HTTP API, used by the CLI.

Built on httpx. Errors come back as `ApiError` carrying the problem+json body.

A client is given one or more server URLs (the nodes of a cluster) and follows
the leader (docs/api.md "General rules"):

- A `307`/`308` redirect is followed by hand, with the same method, body and
  token (httpx would drop the `Authorization` header on a redirect to another
  origin, and every node of a cluster is another origin). The origin that
  answered is asked first by the next request.
- A connection that could not be opened, and a `503`, move on to the next URL;
  after a round over every URL without an answer the client sleeps a jittered,
  doubling back-off and goes round again, until `failover_timeout_s` has
  passed; then it raises `Unavailable` naming what each URL said. A round in
  which every https:// server's certificate was refused (not signed by a
  trusted CA, or not for that host) raises at once: waiting does not fix that.
- A request that may have reached a server (the connection broke, or timed
  out, after the request was sent) is retried only when repeating it is
  harmless: a `GET`, a schedule preview, a create carrying a `request_key` (a batch: every item
  carrying one), a claim carrying a `claim_key`, a pause or a resume. Any
  other write raises `OutcomeUnknown`, since the change may or may not have
  been made. A claim with a key is also sent again after any `5xx`.
- `claim` chooses a new `claim_key` for each claim unless given one, so a
  claim whose outcome is unknown is sent again with its key and answers the
  runs it took (docs/semantics.md "Idempotent claims").
"""

import json
import os
import random
import time
from collections.abc import Sequence
from typing import Any

import httpx

from tempo import limits
from tempo.net.agent import USER_AGENT
from tempo.net.tls import certificate_refused, client_context

DEFAULT_URL = "http://127.0.0.1:8700"
request_timeout_s = 30.0
# A node that is down refuses at once; this bounds one that does not answer at all.
connect_timeout_s = 3.0
# How long one request keeps trying the URLs before it gives up.
failover_timeout_s = 10.0
backoff_s_min = 0.05
# The `Retry-After: 1` of a node that knows no leader: no point sleeping longer.
backoff_s_max = 1.0
# Hops of one attempt; a cluster needs one, more means nodes disagree on the leader.
redirects_max = 5
# A `GET /v1/cluster` to one node during `tempo cluster status`.
cluster_probe_timeout_s = 2.0

REDIRECTS = (307, 308)
# Writes that are harmless to repeat (docs/api.md: pause and resume are idempotent).
_IDEMPOTENT_SUFFIXES = ("/pause", "/resume")


class ApiError(Exception):
    def __init__(self, status: int, problem: dict[str, Any]):
        self.status = status
        self.problem = problem
        detail = problem.get("detail") or problem.get("title") or ""
        where = "; ".join(f"{e.get('loc') or 'body'}: {e.get('msg')}" for e in problem.get("errors", []))
        super().__init__(f"{status} {problem.get('type', 'error')}: {where or detail}")


class Unavailable(Exception):
    """No server answered (connection errors, timeouts, `503`) before the
    request's deadline: this client's `failover_timeout_s`, or the worker
    library's (tempo.worker)."""


class CertificateRefused(Unavailable):
    """Every URL's server showed a certificate this client does not trust:
    a setting to fix (`ca_file`), which no retry fixes."""


class _Untrusted(str):
    """Why a URL gave no answer: its server's certificate was refused."""


class OutcomeUnknown(Unavailable):
    """A write that is not safe to repeat lost its connection after it was sent:
    the server may or may not have made the change."""


def new_claim_key(rng: random.Random) -> str:
    """A claim key no other claim of the owner uses: 128 random bits."""
    return f"{rng.getrandbits(128):032x}"


def urls_from(text: str | None) -> list[str]:
    """`--url`, else `TEMPO_URL`, else the default; several are comma-separated.
    A bearer token comes from `TEMPO_TOKEN`, a private CA from `TEMPO_CA_FILE`."""
    raw = text or os.environ.get("TEMPO_URL") or DEFAULT_URL
    return [u.strip().rstrip("/") for u in raw.split(",") if u.strip()]


def origin_of(url: httpx.URL | str) -> str:
    url = httpx.URL(str(url))
    return f"{url.scheme}://{url.netloc.decode('ascii')}"


def safe_to_repeat(method: str, path: str, body: Any) -> bool:
    """True when sending this request twice has the effect of sending it once."""
    if method == "GET":
        return True
    if method != "POST":
        return False  # DELETE: a repeat of a delete that went through answers 404
    if path == "/v1/schedules/preview":
        return True  # a computation; it changes nothing
    if path == "/v1/jobs":
        return isinstance(body, dict) and body.get("request_key") is not None
    if path == "/v1/claim":
        return isinstance(body, dict) and body.get("claim_key") is not None
    if path == "/v1/jobs/batch":
        items = body.get("jobs") if isinstance(body, dict) else None
        return items is not None and bool(items) and all(
            isinstance(i, dict) and i.get("request_key") is not None for i in items
        )
    return path.startswith("/v1/jobs/") and path.endswith(_IDEMPOTENT_SUFFIXES)


class Client:
    def __init__(
        self,
        urls: list[str] | str,
        *,
        timeout_s: float = request_timeout_s,
        failover_timeout_s: float = failover_timeout_s,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        rng: random.Random | None = None,
        ca_file: str | None = None,
    ):
        """`ca_file` (else `TEMPO_CA_FILE`): a PEM file of the CA that https://
        servers' certificates must come from, instead of the system trust
        store (net/tls.py); `TlsError` when it cannot be used."""
        self.urls = urls_from(urls) if isinstance(urls, str) else [u.strip().rstrip("/") for u in urls]
        if not self.urls:
            raise ValueError("urls: give at least one server URL")
        for url in self.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"urls: {url!r} is not an http:// or https:// URL")
        if failover_timeout_s < 0:
            raise ValueError(f"failover_timeout_s: not negative (got {failover_timeout_s})")
        self.failover_timeout_s = failover_timeout_s
        self._index = 0  # the URL asked first: the last one that answered
        self._rng = rng or random.Random()
        token = token or os.environ.get("TEMPO_TOKEN")
        headers = {"user-agent": USER_AGENT}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, connect_timeout_s)),
            follow_redirects=False,  # followed in _attempt, keeping the token
            headers=headers,
            transport=transport,
            verify=client_context(ca_file or os.environ.get("TEMPO_CA_FILE") or None),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def leader_url(self) -> str:
        """The URL the next request goes to first."""
        return self.urls[self._index]

    def request(
        self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None, *,
        timeout_s: float | None = None, failover_timeout_s: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """`timeout_s`: of each attempt (a long poll's is longer than the
        client's); `failover_timeout_s`: of the whole, this once."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        content = None if body is None else json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        repeatable = safe_to_repeat(method, path, body)
        # A claim with a key is answered alike however often it is sent: a
        # 5xx of any kind is sent again too (docs/semantics.md).
        retry_5xx = repeatable and path == "/v1/claim"
        patience_s = self.failover_timeout_s if failover_timeout_s is None else failover_timeout_s
        deadline_s = time.monotonic() + patience_s
        delay_s = backoff_s_min
        failures: dict[str, str] = {}
        while True:
            start, count = self._index, len(self.urls)
            for k in range(count):
                base = self.urls[(start + k) % count]
                url = httpx.URL(base + path, params=params)
                outcome = self._attempt(method, url, content, repeatable, timeout_s, retry_5xx, headers)
                if isinstance(outcome, httpx.Response):
                    answered = origin_of(outcome.url)
                    self._prefer(base if answered == origin_of(base) else answered)
                    return _answer(outcome)
                failures[base] = outcome
            untrusted = all(isinstance(why, _Untrusted) for why in failures.values())
            if untrusted or time.monotonic() + delay_s > deadline_s:
                said = "; ".join(f"{u}: {why}" for u, why in failures.items())
                within = "" if untrusted else f" within {patience_s:g} s"
                refused = CertificateRefused if untrusted else Unavailable
                raise refused(f"no server answered {method} {path}{within} ({said})")
            # Full jitter keeps many clients from coming back in step.
            time.sleep(self._rng.uniform(delay_s / 2, delay_s))
            delay_s = min(backoff_s_max, delay_s * 2)

    def _attempt(
        self, method: str, url: httpx.URL, content: bytes | None, repeatable: bool,
        timeout_s: float | None = None, retry_5xx: bool = False, extra_headers: dict[str, str] | None = None,
    ) -> httpx.Response | str:
        """The answer of `url`, redirects followed; or why there was none worth
        returning (then the caller tries the next URL)."""
        headers = {"content-type": "application/json"} if content is not None else {}
        headers |= extra_headers or {}
        extra: dict[str, Any] = {}
        if timeout_s is not None:
            extra["timeout"] = httpx.Timeout(timeout_s, connect=min(timeout_s, connect_timeout_s))
        for _ in range(redirects_max + 1):
            try:
                response = self._http.request(method, url, content=content, headers=headers, **extra)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                # Nothing was sent: safe to send elsewhere, whatever the request.
                if certificate_refused(exc):
                    return _Untrusted(f"certificate refused ({exc}); is --ca-file / TEMPO_CA_FILE the CA that signed it?")
                return f"cannot connect ({exc or type(exc).__name__})"
            except httpx.TransportError as exc:
                if not repeatable:
                    raise OutcomeUnknown(
                        f"{method} {url.path}: {origin_of(url)} broke off after the request was sent "
                        f"({exc or type(exc).__name__}); the change may or may not have been made, "
                        "so it was not sent again"
                    ) from exc
                return f"no answer ({exc or type(exc).__name__})"
            if response.status_code in REDIRECTS and "location" in response.headers:
                url = response.url.join(response.headers["location"])
                continue
            if response.status_code == 503 or (retry_5xx and response.status_code >= 500):
                return f"{response.status_code} {_problem(response).get('type', 'unavailable')}"
            return response
        return f"more than {redirects_max} redirects"

    def _prefer(self, url: str) -> None:
        if url not in self.urls:
            self.urls.append(url)  # a leader reached by a redirect only
        self._index = self.urls.index(url)

    # -- cluster ----------------------------------------------------------------

    def cluster_at(self, url: str) -> dict[str, Any]:
        """`GET /v1/cluster` of the node at `url` itself: no failover, no redirect.

        Raises `httpx.HTTPError` when it does not answer, `ApiError` on an error.
        """
        response = self._http.get(url.rstrip("/") + "/v1/cluster", timeout=cluster_probe_timeout_s)
        return _object(_answer(response))

    # -- jobs -------------------------------------------------------------------

    def create_job(self, body: dict[str, Any]) -> dict[str, Any]:
        return _object(self.request("POST", "/v1/jobs", body))

    def create_jobs(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return _list(_object(self.request("POST", "/v1/jobs/batch", {"jobs": bodies}))["results"])

    def get_job(self, job_id: str) -> dict[str, Any]:
        return _object(self.request("GET", f"/v1/jobs/{job_id}"))

    def list_jobs(self, limit: int | None = None, cursor: str | None = None, **filters: Any) -> dict[str, Any]:
        """`filters`: `state`, `target`, `name_prefix` (docs/api.md "GET /v1/jobs")."""
        return _object(self.request("GET", "/v1/jobs", params={"limit": limit, "cursor": cursor, **filters}))

    def pause_job(self, job_id: str, note: str | None = None) -> dict[str, Any]:
        """Pauses the job; `note`: why, shown with it while it is paused."""
        body = None if note is None else {"note": note}
        return _object(self.request("POST", f"/v1/jobs/{job_id}/pause", body))

    def resume_job(self, job_id: str) -> dict[str, Any]:
        return _object(self.request("POST", f"/v1/jobs/{job_id}/resume"))

    def update_job(self, job_id: str, patch: dict[str, Any], if_version: int | None = None) -> dict[str, Any]:
        """`PATCH /v1/jobs/{id}` with a merge patch; with `if_version`, only
        if the job is at that version (else `ApiError` 412 version_mismatch)."""
        headers = {"content-type": "application/merge-patch+json"}
        if if_version is not None:
            headers["if-match"] = f'"{if_version}"'
        return _object(self.request("PATCH", f"/v1/jobs/{job_id}", patch, headers=headers))

    def delete_job(self, job_id: str) -> None:
        self.request("DELETE", f"/v1/jobs/{job_id}")

    def job_graph(self, job_id: str, depth: int | None = None) -> dict[str, Any]:
        """`GET /v1/jobs/{id}/graph` (docs/api.md)."""
        params = {} if depth is None else {"depth": str(depth)}
        return _object(self.request("GET", f"/v1/jobs/{job_id}/graph", params=params))

    def trigger_job(self, job_id: str) -> dict[str, Any]:
        return _object(self.request("POST", f"/v1/jobs/{job_id}/trigger"))

    def backfill_job(self, job_id: str, since: str, until: str, overlap: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"from": since, "until": until}
        if overlap is not None:
            body["overlap"] = overlap
        return _object(self.request("POST", f"/v1/jobs/{job_id}/backfill", body))

    def list_runs(self, job_id: str, **params: Any) -> dict[str, Any]:
        return _object(self.request("GET", f"/v1/jobs/{job_id}/runs", params=params))

    def get_run(self, run_id: str) -> dict[str, Any]:
        return _object(self.request("GET", f"/v1/runs/{run_id}"))

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        """`POST /v1/runs/{id}/cancel`: the run as the cancel left it."""
        return _object(self.request("POST", f"/v1/runs/{run_id}/cancel"))

    # -- workers ------------------------------------------------------------------

    def claim(
        self, worker: str, queues: Sequence[str], *, max_runs: int = 1, wait_s: float = 0,
        claim_key: str | None = None,
    ) -> list[dict[str, Any]]:
        """`POST /v1/claim` with a `claim_key` (a new one unless given): a
        claim whose outcome is unknown (a connection lost after it was sent,
        a timeout, a `5xx`, a leader change) is sent again with the same
        key, to any URL, for at most `limits.claim_retry_s_max`, and answers
        the runs the first one took."""
        body = {
            "worker": worker, "queues": list(queues), "max_runs": max_runs, "wait_s": wait_s,
            "claim_key": claim_key or new_claim_key(self._rng),
        }
        runs: list[dict[str, Any]] = self.request(
            "POST", "/v1/claim", body, timeout_s=wait_s + request_timeout_s,
            failover_timeout_s=max(self.failover_timeout_s, limits.claim_retry_s_max),
        )["runs"]
        return runs

    def list_all_runs(self, **params: Any) -> dict[str, Any]:
        """Runs across jobs: `status`, `since`, `until`, `limit`, `cursor`."""
        return _object(self.request("GET", "/v1/runs", params=params))

    def preview(self, schedule: dict[str, Any], after: str | None = None, count: int | None = None) -> list[str]:
        body: dict[str, Any] = {"schedule": schedule}
        if after is not None:
            body["after"] = after
        if count is not None:
            body["count"] = count
        return _list(_object(self.request("POST", "/v1/schedules/preview", body))["times"])


def _object(answer: Any) -> dict[str, Any]:
    """An answer the API gives as a JSON object."""
    assert isinstance(answer, dict), f"the API answered {type(answer).__name__} where an object was due"
    return answer


def _list(answer: Any) -> list[Any]:
    """A field the API gives as a JSON array."""
    assert isinstance(answer, list), f"the API answered {type(answer).__name__} where an array was due"
    return answer


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        problem = response.json()
    except ValueError:
        # Not JSON: whatever answers at this URL is not a tempo server (a web
        # server's error page, a proxy). Say so in one line, not with its page.
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        return {
            "type": "not_tempo",
            "detail": f"{response.url} answered {response.status_code} with {kind}, not a tempo "
            f"problem: is --url (TEMPO_URL) a tempo server?",
        }
    return problem if isinstance(problem, dict) else {"type": "error", "detail": str(problem)[:500]}


def _answer(response: httpx.Response) -> Any:
    """The decoded body of a 2xx; `ApiError` for anything else."""
    if response.status_code >= 300:
        raise ApiError(response.status_code, _problem(response))
    return None if response.status_code == 204 else response.json()
