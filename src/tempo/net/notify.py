"""Notifications: signed POSTs to a job's (or its owner's) URL when a run
fails for good, a one-off completes, or a job recovers (docs/semantics.md
"Notifications", docs/operations.md "Notifications").

They are derived from the replicated event feed, not kept apart: while this
node leads, the notifier reads every owner's events after its cursor,
delivers those a notify setting asks for, and commits the cursor past
those that finished (`NotifyCursor`, a replicated command). A new
leader goes on from the committed cursor, so a failover loses no notice;
it may send again the notices that were in flight, or finished after the
last commit of the cursor, when the old leader stopped. Delivery is thus at
least once per event, up to the bounded retries: a notice whose endpoint
fails every try is given up, logged and counted
(`tempo_notifications_dropped_total`). Receivers deduplicate on the body's
`id` (the event's cursor in `GET /v1/events`).

The notifier has its own tasks, its own HTTP client and its own bounds
(limits.py "Notifications"); runs never wait for it. The cursor moves past
a notice once it was taken or given up, so it trails the oldest notice in
flight; an endpoint that hangs holds its own host's share of the slots
only, and each of its notices for at most `limits.notify_notice_s_max`.

Each POST carries `Tempo-Signature: t=<unix seconds>,v1=<hex>`, where hex is
HMAC-SHA256 with the config's `[notify] secret` of `"<t>.<body>"`, signed
anew for every try (as Stripe signs webhooks).
"""

import hashlib
import hmac
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
import trio

from tempo import clock, errors, limits, targets
from tempo import metrics as prom
from tempo.config import NOTIFY_EVENTS, NotifyConfig, NotifyTarget
from tempo.engine import CommandLog, Event, NotifyCursor, Store
from tempo.net.agent import USER_AGENT
from tempo.net.egress import TargetRefused, policy_transport
from tempo.net.tls import client_context

log = logging.getLogger("tempo.notify")
SIGNATURE_HEADER = "tempo-signature"


class Notice(msgspec.Struct):
    """The body of a notification."""

    id: str  # the event's cursor in GET /v1/events: the same on every try and every leader
    type: str
    at: str
    owner: str
    job_id: str
    run_id: str | None
    detail: dict[str, Any]


_encoder = msgspec.json.Encoder()


def signature(secret: str, t_s: int, body: bytes) -> str:
    """The `Tempo-Signature` header's value for `body` signed at `t_s`."""
    mac = hmac.new(secret.encode(), str(t_s).encode() + b"." + body, hashlib.sha256)
    return f"t={t_s},v1={mac.hexdigest()}"


@dataclass
class NotifyCounts:
    """Counters for /metrics; they outlive one term of leadership."""

    sent: int = 0  # notices an endpoint took (2xx)
    retries: int = 0  # tries after a failed one
    dropped: int = 0  # notices given up after every try failed
    cursor: int = 0  # the last event sequence handled
    by_type: dict[str, int] = field(default_factory=dict)


class Notifier:
    def __init__(
        self,
        store: Store,
        committer: CommandLog,
        config: NotifyConfig,
        *,
        now_ms: Callable[[], int],
        events_changed: Callable[[], trio.Event] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        policy: targets.TargetPolicy | None = None,
    ) -> None:
        """`events_changed` gives the event that is set when events were
        written (the dispatcher's); without it the feed is polled.
        `transport`: tests' stand-in for the network. `policy`: where
        notices may connect (docs/operations.md "Target policy"); the
        default allows loopback, as a node without tokens does."""
        self.policy = targets.TargetPolicy() if policy is None else policy
        self.store = store
        self.committer = committer
        self.config = config
        self.now_ms = now_ms
        self.events_changed = events_changed
        self.counts = NotifyCounts()
        self.transport = transport
        self._reset(0)

    def _reset(self, committed: int) -> None:
        """The state of one term of leadership, which starts at `committed`."""
        # Sequences of the notices read and not finished; every event up to
        # `read_seq` was read. The cursor is below the lowest pending.
        self._pending: set[int] = set()
        self._read_seq = committed
        # Set when a notice finished or a host's try failed: the reader
        # waits on it for room in the queue.
        self._changed = trio.Event()
        self._slots = trio.CapacityLimiter(limits.notify_concurrency)
        self._host_slots: dict[str, trio.CapacityLimiter] = {}
        # Per host: its notices pending, and those dropped since its queue
        # last had room.
        self._host_pending: dict[str, int] = {}
        self._host_overflow: dict[str, int] = {}
        self._failing: set[str] = set()  # hosts whose last try failed

    def target_of(self, owner: str, event: Event) -> NotifyTarget | None:
        """Where the notice of `event` goes: the job's own setting, else the
        owner's default; None when neither asks for this event. Only the
        events a `notify` may name are sent: a job's audit events
        (`job.created`, `job.updated`, ...) never are, and cost no read."""
        if event.type not in NOTIFY_EVENTS:
            return None
        job = self.store.get_job_any(event.job_id)
        target: NotifyTarget | None
        if job is not None and job.owner == owner and job.notify is not None:
            target = NotifyTarget(job.notify.url, tuple(job.notify.events))
        else:
            target = self.config.owners.get(owner)
        if target is None or event.type not in target.events:
            return None
        return target

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        verify = client_context(self.config.ca_file)
        pool = httpx.Limits(max_connections=limits.notify_concurrency)
        # On a worker thread, transport and its TLS context included: loading
        # CA certificates holds the thread that does it for 40-120 ms.
        made = await trio.to_thread.run_sync(lambda: httpx.AsyncClient(
            verify=verify, follow_redirects=False, headers={"user-agent": USER_AGENT}, limits=pool, trust_env=False,
            transport=self.transport or policy_transport(self.policy, pool, verify),
        ))
        async with made as client, trio.open_nursery() as nursery:
            committed = self.store.notify_cursor()
            if committed is None:
                # The first leader with notifications on starts at the feed's
                # end: events from before notifications existed send nothing.
                committed = self.store.event_seq()
                await self._commit(committed)
            self.counts.cursor = committed
            self._reset(committed)
            nursery.start_soon(self._commit_loop, committed)
            log.info("notifier: sending notices of the events after %d", committed)
            task_status.started()
            while True:
                room = min(limits.notify_batch_events, limits.notify_pending_events_max - len(self._pending))
                if room <= 0:
                    await self._changed.wait()
                    self._changed = trio.Event()
                    continue
                batch = self.store.events_of_all(self._read_seq, room)
                if not batch:
                    await self._wait()
                    continue
                for owner, seq, event in batch:
                    assert seq > self._read_seq, "the feed is read in order"
                    target = self.target_of(owner, event)
                    if target is not None and await self._admit(target, seq, event):
                        self._pending.add(seq)
                        nursery.start_soon(self._deliver, client, target, owner, seq, event)
                    self._read_seq = seq

    async def _admit(self, target: NotifyTarget, seq: int, event: Event) -> bool:
        """Whether to send the notice: when its host's queue is full, the
        reader waits for room while the host answers, and drops the notice
        (counted, logged once per overflow) while the host's last try failed,
        so that a host that does not answer holds up no other host."""
        host = _host(target.url)
        while self._host_pending.get(host, 0) >= limits.notify_host_pending_max and host not in self._failing:
            await self._changed.wait()
            self._changed = trio.Event()
        if self._host_pending.get(host, 0) < limits.notify_host_pending_max:
            self._host_pending[host] = self._host_pending.get(host, 0) + 1
            return True
        self.counts.dropped += 1
        dropped = self._host_overflow[host] = self._host_overflow.get(host, 0) + 1
        if dropped == 1:
            log.warning("notice %s (%s) of job %s dropped: %d notices wait for its endpoint's host already; "
                        "more are dropped until they drain", seq, event.type, event.job_id,
                        limits.notify_host_pending_max, extra={"job_id": event.job_id, "event": event.type})
        return False

    def _done(self, host: str) -> None:
        left = self._host_pending[host] - 1
        if left > 0:
            self._host_pending[host] = left
        else:
            del self._host_pending[host]
        dropped = self._host_overflow.pop(host, 0)
        if dropped:
            log.warning("%d notices to one endpoint's host were dropped while its queue was full", dropped)

    def cursor(self) -> int:
        """The last sequence up to which every notice finished."""
        return min(self._pending) - 1 if self._pending else self._read_seq

    async def _wait(self) -> None:
        with trio.move_on_after(limits.notify_idle_wait_s):
            if self.events_changed is None:
                await trio.sleep_forever()
            await self.events_changed().wait()

    async def _commit_loop(self, committed: int) -> None:
        while True:
            await trio.sleep(limits.notify_cursor_commit_s)
            cursor = self.cursor()
            if cursor > committed:
                await self._commit(cursor)
                committed = self.counts.cursor = cursor

    async def _commit(self, cursor: int) -> None:
        while True:
            try:
                await self.committer.submit(NotifyCursor(self.now_ms(), cursor))
                return
            except (errors.Overloaded, errors.StorageFault):
                # Nothing written: the cursor stays behind (a notice may be
                # sent again, never lost), and the next try comes later.
                await trio.sleep(limits.notify_idle_wait_s)

    async def _deliver(self, client: httpx.AsyncClient, target: NotifyTarget, owner: str, seq: int, event: Event) -> None:
        host = _host(target.url)
        host_slots = self._host_slots.setdefault(host, trio.CapacityLimiter(limits.notify_host_concurrency))
        try:
            # The host's slot first: notices queued behind a stuck host hold
            # none of the slots other hosts use.
            async with host_slots, self._slots:
                await self._send(client, target, owner, seq, event)
        finally:
            if host_slots.borrowed_tokens == 0 and host_slots.statistics().tasks_waiting == 0:
                self._host_slots.pop(host, None)
            self._done(host)
            self._pending.discard(seq)
            self._changed.set()

    async def _send(self, client: httpx.AsyncClient, target: NotifyTarget, owner: str, seq: int, event: Event) -> None:
        body = _encoder.encode(Notice(
            str(seq), event.type, clock.iso_from_ms(event.at_ms), owner, event.job_id, event.run_id, event.detail
        ))
        fields = {"job_id": event.job_id, "run_id": event.run_id, "event": event.type}
        error = ""
        for attempt in range(1, limits.notify_attempts_max + 1):
            if attempt > 1:
                self.counts.retries += 1
                await trio.sleep(limits.notify_backoff_s[attempt - 2])
            error = await self._try(client, target.url, body)
            if error:
                self._failing.add(_host(target.url))
                self._changed.set()  # a reader waiting for this host's room drops instead now
            else:
                self._failing.discard(_host(target.url))
                self.counts.sent += 1
                self.counts.by_type[event.type] = self.counts.by_type.get(event.type, 0) + 1
                log.debug("notice %s (%s) of job %s sent", seq, event.type, event.job_id, extra=fields)
                return
        self.counts.dropped += 1
        # The URL stays out of the line: it may carry a secret.
        log.warning("notice %s (%s) of job %s dropped after %d tries: %s", seq, event.type, event.job_id,
                    limits.notify_attempts_max, error, extra=fields)

    async def _try(self, client: httpx.AsyncClient, url: str, body: bytes) -> str:
        """One POST; "" when the endpoint took it, else what went wrong."""
        t_s = self.now_ms() // 1000
        headers = {"content-type": "application/json", SIGNATURE_HEADER: signature(self.config.secret, t_s, body)}
        try:
            with trio.fail_after(limits.notify_timeout_s):
                response = await client.post(url, content=body, headers=headers, timeout=limits.notify_timeout_s)
        except trio.TooSlowError:
            return f"no answer within {limits.notify_timeout_s:g} s"
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return f"{type(exc).__name__}: {str(exc)[:limits.notify_error_chars_max]}"
        except TargetRefused as exc:
            return str(exc)[:limits.notify_error_chars_max]
        if 200 <= response.status_code < 300:
            return ""
        return f"HTTP {response.status_code}"


def _host(url: str) -> str:
    """The scheme, host and port of a URL: the unit of the per-host bounds."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def metric_lines(counts: NotifyCounts | None) -> list[str]:
    """The notifier's lines of /metrics; none when notifications are off."""
    if counts is None:
        return []
    lines = prom.head("tempo_notifications_sent_total", "counter", "Notices an endpoint answered 2xx, by event type.")
    for kind in NOTIFY_EVENTS:
        lines.append(prom.sample("tempo_notifications_sent_total", counts.by_type.get(kind, 0), {"type": kind}))
    lines += prom.head("tempo_notification_retries_total", "counter", "Notice deliveries tried again after a failure.")
    lines.append(prom.sample("tempo_notification_retries_total", counts.retries))
    lines += prom.head(
        "tempo_notifications_dropped_total", "counter", "Notices given up after every try failed (logged each)."
    )
    lines.append(prom.sample("tempo_notifications_dropped_total", counts.dropped))
    lines += prom.head("tempo_notify_cursor", "gauge", "The last event sequence the notifier handled.")
    lines.append(prom.sample("tempo_notify_cursor", counts.cursor))
    return lines
