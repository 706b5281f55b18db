"""The jobs' handlers (docs/api.md "Jobs"), mixed into `net/api.py`'s
`Api`: create (one, or a batch), read, list, count, change by a merge
patch, pause, resume, delete, trigger, backfill, a job's graph, and a
schedule's preview; with the job's view and the merge of a patch."""

from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any

import msgspec
import trio
from msgspec import Meta

from tempo import clock, errors, ids, limits
from tempo.config import OwnerLimits
from tempo.engine import Created, Job, check_json_value, check_label_key, preview_occurrences
from tempo.net import views
from tempo.net.asgi import (
    Request,
    Response,
    decode,
    decoders,
    encode,
    invalid_from_msgspec,
    problem_of,
    query_values,
)
from tempo.net.calendar_api import preview_calendar
from tempo.net.handlers import Handlers, is_decimal, page_limit
from tempo.rate import TokenBucket
from tempo.schema import (
    BackfillIn,
    BackfillOut,
    BatchItemResult,
    GraphEdgeOut,
    GraphOut,
    JobBatchCreate,
    JobBatchResult,
    JobCounts,
    JobCreate,
    JobsPage,
    PauseIn,
    PreviewIn,
    PreviewOut,
)

_create = decoders(JobCreate)
_batch = decoders(JobBatchCreate)


class _JobBatchTyped(msgspec.Struct, forbid_unknown_fields=True):
    """`JobBatchCreate` with its items decoded: the fast path of a batch with
    no bad item, which decodes to exactly what the item-by-item path does."""

    jobs: Annotated[list[JobCreate], Meta(min_length=1, max_length=limits.batch_jobs_max)]


_batch_typed = decoders(_JobBatchTyped)


class _KeyOnly(msgspec.Struct):
    """A batch item the decoder rejected, read again for its request key
    alone (its other fields, known or not, are skipped)."""

    request_key: str | None = None


_key_only = decoders(_KeyOnly)
_preview = decoders(PreviewIn)
_backfill = decoders(BackfillIn)
_pause = decoders(PauseIn)
# What a patch may name (docs/api.md "Change a job"), and why it may not name
# the other fields of a job's view.
_PATCHABLE = frozenset({
    "name", "target", "payload", "schedule", "retry", "lease_s", "jitter_s", "labels", "notify", "timeout_s",
    "overlap", "catchup",
})
# Objects a patch merges into the job's key by key (RFC 7396); the other
# fields it names are replaced whole. `schedule` merges too, with the rule
# for its kinds (`_merge_schedule`).
_MERGED = frozenset({"retry", "labels", "notify", "catchup"})
_FIXED_WHY = dict.fromkeys(
    ("id", "owner", "state", "created_at", "next_run_at", "request_key", "version", "last_run", "runs",
     "paused", "runs_left", "dependents"),
    "cannot be changed by a patch",
)
# A schedule's kinds, which exclude each other, and the keys that go only
# with one kind (or, for the end conditions, only with a repeating one):
# they leave with the kind a patch removes (docs/api.md "Change a job").
_SCHEDULE_KINDS = ("at", "cron", "every_s", "after")
_KIND_ONLY_KEYS = {"at": (), "cron": ("timezone", "dst"), "every_s": ("start_at",), "after": ()}
_REPEATING_ONLY_KEYS = ("end_at", "max_runs", "requires", "calendar", "on_excluded")
_patch_body = decoders(dict[str, Any])
_create_json = _create[0]
_json_enc = msgspec.json.Encoder()


def _tagged(response: Response, version: int) -> Response:
    response.headers.append((b"etag", f'"{version}"'.encode()))
    return response


def _if_match(request: Request, of: str = "job") -> set[int] | None:
    """The versions `If-Match` names; None without the header (or with
    `*`, any version of a job that exists). A well-formed tag that is not
    a version this server gave out matches none (`412`); a header that is
    not `*` or a list of quoted tags is `400` (docs/api.md "Versions")."""
    raw = request.headers.get(b"if-match")
    if raw is None:
        return None
    text = raw.decode("latin-1").strip()
    if text == "*":
        return None
    versions: set[int] = set()
    for tag in text.split(","):
        tag = tag.strip().removeprefix("W/")
        if not (len(tag) >= 2 and tag[0] == tag[-1] == '"' and '"' not in tag[1:-1]):
            raise errors.Invalid.at(
                "header.if-match", f'expected "*" or the {of}\'s version as its ETag gives it, in quotes: "<version>", e.g. "3"'
            )
        inner = tag[1:-1]
        if inner.isdecimal() and len(inner) <= 19:
            versions.add(int(inner))
    return versions


def _merge_patch(target: object, patch: object) -> object:
    """RFC 7396: a patch object merges into an object key by key, `null`
    removing the key; any other value replaces the target whole."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge_patch(merged.get(key), value)
    return merged


def _merge_schedule(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """`patch` merged into the job's schedule key by key (RFC 7396, `dst`
    too), so a new `cron` keeps the zone and the DST policy. A schedule has
    one kind: a patch that would leave two is `400` naming both, and one
    that removes the kind (`"cron": null`) removes the keys only that kind
    takes (a cron's `timezone` and `dst`, an `every_s`'s `start_at`; a
    repeating schedule's end conditions when the new kind is `at`), unless
    the patch names them, when they are checked with the new kind as a
    create checks them (docs/api.md "Change a job")."""
    merged = _merge_patch(current, patch)
    assert isinstance(merged, dict)
    kinds = [kind for kind in _SCHEDULE_KINDS if merged.get(kind) is not None]
    if len(kinds) > 1:
        old = [kind for kind in kinds if current.get(kind) is not None]
        both = " and ".join(kinds)
        why = (
            f"a schedule has one kind, and this patch leaves {both}: remove the old one with null, "
            f'e.g. {{"schedule": {{"{old[0] if old else kinds[0]}": null, ...}}}}'
        )
        raise errors.Invalid(f"schedule: {why}", [(f"schedule.{kind}", why) for kind in kinds])
    for kind in _SCHEDULE_KINDS:
        if current.get(kind) is None or merged.get(kind) is not None:
            continue  # not the old kind, or kept
        gone = _KIND_ONLY_KEYS[kind] + (_REPEATING_ONLY_KEYS if kinds == ["at"] else ()) + (
            ("requires", "calendar", "on_excluded") if kinds == ["after"] else ())  # a clock schedule's
        for key in gone:
            if key not in patch:
                merged.pop(key, None)
    if "calendar" in patch and patch["calendar"] is None and "on_excluded" not in patch:
        merged.pop("on_excluded", None)  # it goes with its calendar, as a kind's keys go with the kind
    return merged


def _patched(view: Any, patch: dict[str, Any]) -> JobCreate:
    """The job's create body after `patch`, decoded as a create is, so a
    field it leaves invalid is `400` at the same `loc`. `payload` is
    replaced whole, never merged: it is the client's own value; `schedule`
    merges by `_merge_schedule` (docs/api.md)."""
    current = msgspec.to_builtins(view)
    # `notify` only when the patch names it: a job's own setting is kept
    # as it is otherwise, even where the server's config has none now.
    base = {
        name: current[name] for name in _PATCHABLE
        if current.get(name) is not None and (name != "notify" or name in patch)
    }
    # A kept `catchup` is checked with the new schedule as a create checks it.
    for name, value in patch.items():
        if value is None:
            base.pop(name, None)
        elif name == "schedule" and isinstance(value, dict) and isinstance(base.get(name), dict):
            base[name] = _merge_schedule(base[name], value)
        elif name in _MERGED:
            base[name] = _merge_patch(base.get(name), value)
        else:
            base[name] = value
    try:
        return _create_json.decode(_json_enc.encode(base))
    except msgspec.MsgspecError as exc:
        raise invalid_from_msgspec(exc, kind=JobCreate) from None
    except RecursionError:
        raise errors.Invalid.at("", "the body is nested too deeply") from None


def request_content_type(request: Request) -> bytes:
    return b"application/msgpack" if request.wants_msgpack else b"application/json"


def _decode_batch_at_once(request: Request) -> list[JobCreate] | None:
    """All items in one decode, or None when any item (or the batch) is bad:
    then the items are decoded one by one for their problems."""
    try:
        return _batch_typed[1 if request.is_msgpack else 0].decode(request.body).jobs
    except (msgspec.MsgspecError, RecursionError):
        return None


def _rejected_key(raw: msgspec.Raw, which: int) -> str | None:
    """The request key of a batch item the decoder rejected, or None when it
    has none that a valid item could have (absent, not a string, too long)."""
    try:
        key = _key_only[which].decode(raw).request_key
    except (msgspec.MsgspecError, RecursionError):
        return None
    return key if key is not None and len(key) <= limits.request_key_chars_max else None



_JOB_STATES = ("active", "paused", "completed")


def _job_filter(request: Request) -> Callable[[Any], bool] | None:
    """The filter of `GET /v1/jobs` (docs/api.md "GET /v1/jobs") on what
    a job's record holds, or None; labels are `_label_filter`'s."""
    state = request.query.get("state")
    if state is not None and state not in _JOB_STATES:
        raise errors.Invalid.at("query.state", f"one of {', '.join(_JOB_STATES)}")
    target = request.query.get("target")
    if target is not None and not 1 <= len(target) <= limits.target_chars_max:
        raise errors.Invalid.at("query.target", f"1 to {limits.target_chars_max} characters")
    name_prefix = request.query.get("name_prefix")
    if name_prefix is not None and not 1 <= len(name_prefix) <= limits.name_chars_max:
        raise errors.Invalid.at("query.name_prefix", f"1 to {limits.name_chars_max} characters")
    if state is None and target is None and name_prefix is None:
        return None

    def match(job: Any) -> bool:
        return (
            (state is None or job.state == state)
            and (target is None or job.target == target)
            and (name_prefix is None or (job.name is not None and job.name.startswith(name_prefix)))
        )

    return match


def _label_filter(request: Request) -> list[tuple[str, str]]:
    """The `label` filters of `GET /v1/jobs` (docs/api.md "GET /v1/jobs"):
    `key:value` each, every one a job must carry."""
    given = query_values(request.raw_query, "label") if "label" in request.query else []
    if len(given) > limits.job_labels_max:
        raise errors.Invalid.at("query.label", f"at most {limits.job_labels_max} label filters")
    found = []
    for text in given:
        name, colon, value = text.partition(":")
        if not colon:
            raise errors.Invalid.at("query.label", f"{text[:80]!r} is not key:value (e.g. team:payments)")
        if not check_label_key(name):
            raise errors.Invalid.at(
                "query.label", f"the key {name[:80]!r} is not 1-{limits.label_key_chars_max} characters of a-z 0-9 . _ / -"
            )
        if len(value) > limits.label_value_chars_max:
            raise errors.Invalid.at("query.label", f"a value is at most {limits.label_value_chars_max} characters")
        found.append((name, value))
    return found



class JobHandlers(Handlers):
    """`/v1/jobs` and the paths below it, but a job's runs; and `POST /v1/schedules/preview`."""

    # Set up by `Api.__init__`.
    limits_of: Callable[[str], OwnerLimits]
    create_buckets: dict[str, TokenBucket]
    rate_limited: Counter[str]
    previews_computing: trio.CapacityLimiter
    # `CalendarHandlers`': a preview under a calendar.
    calendar_preview: Callable[[Request, PreviewIn, str, str, int], Coroutine[Any, Any, Response]]

    def _check_creates(self, owner: str, count: int) -> None:
        """Spends `count` of the owner's create tokens, or refuses the whole
        request with 429 before anything is proposed. A request needs as many
        tokens as it has items, or a full bucket when it has more items than
        the bucket holds; the debt it leaves is paid off before the next fits."""
        owner_limits = self.limits_of(owner)
        if owner_limits.creates_per_s is None:
            return
        now_ms = clock.monotonic_ms()  # a rate: a duration, not an instant
        bucket = self.create_buckets.get(owner)
        if bucket is None:
            assert owner_limits.create_burst is not None
            bucket = TokenBucket(owner_limits.creates_per_s, owner_limits.create_burst, now_ms)
            self.create_buckets[owner] = bucket
        wait_ms = bucket.wait_ms(now_ms, count)
        if wait_ms > 0:
            self.rate_limited[owner] += 1
            retry_after_s = max(1, -(-wait_ms // 1000))
            raise errors.RateLimited(
                f"owner {owner} may create {owner_limits.creates_per_s:g} jobs a second "
                f"(bursts of {owner_limits.create_burst}); retry in {retry_after_s} s",
                retry_after_s,
            )
        bucket.take(now_ms, count)

    async def create_job(self, request: Request) -> Response:
        body = decode(request, _create)
        self._check_creates(self.owner(request), 1)
        [outcome] = await self.jobs.create(self.owner(request), [body], from_msgpack=request.is_msgpack)
        if isinstance(outcome, errors.TempoError):
            raise outcome
        if outcome.new:
            return _tagged(encode(request, self.job_view(outcome.job), 201), outcome.job.version)
        # An existing job: with its outcome.
        return _tagged(encode(request, self.job_view(outcome.job), 200), outcome.job.version)

    async def create_batch(self, request: Request) -> Response:
        items: Sequence[JobCreate | errors.TempoError] | None = _decode_batch_at_once(request)
        rejected_keys_of: dict[int, str] = {}
        if items is None:
            items, rejected_keys_of = self._decode_batch_items(request)
        self._check_creates(self.owner(request), len(items))
        outcomes = await self.jobs.create(
            self.owner(request), items, from_msgpack=request.is_msgpack, rejected_keys_of=rejected_keys_of
        )
        shared: dict[Any, Any] = {}
        # The edges of the items that name some (docs/semantics.md "Dependencies"), read only then.
        edges = self.store.deps_views([o.job.id for o in outcomes if isinstance(o, Created)]) if any(
            not isinstance(i, errors.TempoError) and (i.schedule.after or i.schedule.requires) for i in items
        ) else {}
        # Their calendars likewise (docs/semantics.md "Calendars"): a view as a single create's.
        named = any(not isinstance(i, errors.TempoError) and i.schedule.calendar for i in items)
        results = []
        for start in range(0, len(outcomes), limits.batch_slice_items):
            if start:
                await trio.lowlevel.checkpoint()  # the views in slices: docs/operations.md "Event-loop lag"
            results += [
                self._batch_item(o, shared, edges, named) for o in outcomes[start : start + limits.batch_slice_items]
            ]
        return encode(request, JobBatchResult(results))

    def _batch_item(
        self, outcome: Created | errors.TempoError, shared: dict[Any, Any], edges: dict[str, Any], calendars: bool
    ) -> BatchItemResult:
        if isinstance(outcome, errors.TempoError):
            problem = problem_of(outcome)
            return BatchItemResult(problem.status, problem=problem)
        job = outcome.job
        use = self.store.calendar_use(job.id) if calendars else None
        view = views.job_view(job, shared, calendar=use, next_run_ms=self._next_run(job, use))
        return BatchItemResult(201 if outcome.new else 200, job=views.with_deps(view, edges.get(job.id)))

    def _decode_batch_items(self, request: Request) -> tuple[list[JobCreate | errors.TempoError], dict[int, str]]:
        """Item by item, so each item's problem names paths inside that item;
        and the request key of each item the decoder rejected, by its place,
        so a later item with that key gets its answer (docs/api.md "POST
        /v1/jobs/batch")."""
        batch = decode(request, _batch)
        which = 1 if request.is_msgpack else 0
        decoder = _create[which]
        items: list[JobCreate | errors.TempoError] = []
        rejected_keys_of: dict[int, str] = {}
        for i, raw in enumerate(batch.jobs):
            try:
                items.append(decoder.decode(raw))
                continue
            except msgspec.MsgspecError as exc:
                items.append(invalid_from_msgspec(exc, kind=decoder.type))
            except RecursionError:
                items.append(errors.Invalid.at("", "the item is nested too deeply"))
            key = _rejected_key(raw, which)
            if key is not None:
                rejected_keys_of[i] = key
        return items, rejected_keys_of

    def job_view(self, job: Any) -> Any:
        """The job with what its runs came to (docs/api.md "Outcomes")."""
        use = self.store.calendar_use(job.id)
        view = views.job_view(job, outcome=self.store.job_outcome(job.id), calendar=use, next_run_ms=self._next_run(job, use))
        return views.with_deps(view, self.store.deps_views([job.id]).get(job.id))

    def _next_run(self, job: Job, use: object) -> int | None:
        """`next_run_at`: with a calendar, when the next run happens under
        it as it is now (docs/semantics.md "Calendars")."""
        return job.next_run_at_ms if use is None else self.jobs.calendars.next_run_ms(job, self.jobs.now_ms())

    @staticmethod
    def if_match(request: Request, of: str = "job") -> set[int] | None:
        return _if_match(request, of)

    def _job_answer(self, request: Request, job: Job) -> Response:
        """A job's answer, with its version as the ETag."""
        return _tagged(encode(request, self.job_view(job)), job.version)

    async def get_job(self, request: Request, job_id: str) -> Response:
        return self._job_answer(request, self.store.get_job(self._owner_of_job(request, job_id), job_id))

    async def patch_job(self, request: Request, job_id: str) -> Response:
        """A JSON merge patch (RFC 7396) of the job's mutable fields
        (docs/api.md "Change a job")."""
        owner = self._owner_of_job(request, job_id)
        patch = decode(request, _patch_body)
        for name in patch:
            if name not in _PATCHABLE:
                raise errors.Invalid.at(name, _FIXED_WHY.get(name, "unknown field"))
        if request.is_msgpack:
            # The merged body is read back as JSON, which would spell a
            # binary value as a base64 string.
            for name in ("payload", "labels", "notify"):
                if name in patch:
                    check_json_value(patch[name], name)
        wanted = _if_match(request)
        for _ in range(limits.patch_tries_max):
            job = self.store.get_job(owner, job_id)
            if wanted is not None and job.version not in wanted:
                raise errors.VersionMismatch(f"job {job_id} is at version {job.version}")
            body = _patched(self.job_view(job), patch)
            try:
                changed = await self.jobs.patch(
                    job, body, from_msgpack=request.is_msgpack, keep_notify="notify" not in patch
                )
            except errors.VersionMismatch:
                if wanted is not None:
                    raise
                continue  # changed since it was read: merged again onto the new version
            return self._job_answer(request, changed)
        raise errors.Conflict(f"job {job_id} kept changing while this patch was applied: send it again")

    async def list_jobs(self, request: Request) -> Response:
        limit = page_limit(request)
        cursor = request.query.get("cursor") or None
        if cursor is not None and not ids.is_job_id(cursor):
            raise errors.Invalid.at("query.cursor", "not a cursor this server gave out")
        match = _job_filter(request)
        labels = _label_filter(request)
        if self._sees_all(request):
            found, next_cursor = self.store.list_all_jobs(limit, cursor, match, labels)
        else:
            found, next_cursor = self.store.list_jobs(self.owner(request), limit, cursor, match, labels)
        outcomes = self.store.job_outcomes([j.id for j in found])
        shared: dict[Any, Any] = {}
        edges = self.store.deps_views([j.id for j in found])
        page = []
        for j in found:
            use = self.store.calendar_use(j.id)
            view = views.job_view(j, shared, outcomes.get(j.id), use, next_run_ms=self._next_run(j, use))
            page.append(views.with_deps(view, edges.get(j.id)))
        return encode(request, JobsPage(page, next_cursor))

    async def pause_job(self, request: Request, job_id: str) -> Response:
        """`POST /v1/jobs/{id}/pause`, its body optional: `{"note": ...}`.
        The job keeps who paused it (the token's owner and role)."""
        note = decode(request, _pause).note if request.body else None
        principal = request.principal
        job = await self.jobs.pause(
            self._owner_of_job(request, job_id), job_id, by=(principal.owner, principal.role), note=note
        )
        return self._job_answer(request, job)

    async def resume_job(self, request: Request, job_id: str) -> Response:
        return self._job_answer(request, await self.jobs.resume(self._owner_of_job(request, job_id), job_id))

    async def delete_job(self, request: Request, job_id: str) -> Response:
        await self.jobs.delete(self._owner_of_job(request, job_id), job_id)
        return Response(204, b"", request_content_type(request))

    async def trigger_job(self, request: Request, job_id: str) -> Response:
        run = await self.jobs.trigger(self._owner_of_job(request, job_id), job_id)
        return encode(request, views.run_view(run), 201)

    async def backfill_job(self, request: Request, job_id: str) -> Response:
        body = decode(request, _backfill)
        created, existing = await self.jobs.backfill(self._owner_of_job(request, job_id), job_id, body)
        return encode(request, BackfillOut(created, existing))
    async def job_graph(self, request: Request, job_id: str) -> Response:
        """`GET /v1/jobs/{id}/graph?depth=N` (docs/api.md): the edges up and
        down from the job, `depth` steps each way."""
        raw = request.query.get("depth", str(limits.deps_graph_depth_default))
        if not is_decimal(raw) or not 1 <= int(raw) <= limits.deps_graph_depth_max:
            raise errors.Invalid.at("query.depth", f"an integer from 1 to {limits.deps_graph_depth_max}")
        depth = int(raw)
        up, down, cut = self.store.deps_graph(self._owner_of_job(request, job_id), job_id, depth)
        return encode(request, GraphOut(
            job_id, depth, [GraphEdgeOut(p, c) for p, c in up], [GraphEdgeOut(p, c) for p, c in down], cut
        ))


    async def job_counts(self, request: Request) -> Response:
        """`GET /v1/jobs/counts`: from the counts apply keeps, whatever the
        number of jobs (docs/api.md "Count jobs by state")."""
        counts = self.store.job_counts(None if self._sees_all(request) else self.owner(request))
        return encode(request, JobCounts(**counts))


    async def preview(self, request: Request) -> Response:
        body = decode(request, _preview)
        calendar, loc = preview_calendar(body)
        if calendar is not None:
            async with self.previews_computing:
                return await self.calendar_preview(request, body, calendar, loc, self.jobs.now_ms())
        # One preview computes at a time: its slices leave the loop free
        # between them only if no other preview's slice is waiting to run.
        async with self.previews_computing:
            found, timezone = await preview_occurrences(body, self.jobs.now_ms())
            # Spelled out in slices too: 1,000 RFC 3339 strings are milliseconds.
            occurrences = []
            for start in range(0, len(found), limits.preview_slice_times):
                if start:
                    await trio.lowlevel.checkpoint()
                occurrences += views.occurrence_views(found[start : start + limits.preview_slice_times], timezone)
        return encode(request, PreviewOut([o.at for o in occurrences], occurrences))
