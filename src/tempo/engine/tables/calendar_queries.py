"""Reads of the `calendars` table for the store (docs/semantics.md
"Calendars"): one calendar, a page of them, the jobs that use one, and,
for the dispatcher, a job's calendar with its bases folded in, kept in
memory per owner epoch so that a claim does not decode a calendar of
10,000 dates each time."""

from collections.abc import Callable

import lmdb

from tempo import calendars, errors, limits
from tempo.engine.records import Calendar, CalendarUse, Job
from tempo.engine.tables import calendars as rows
from tempo.engine.tables.layout import U64
from tempo.engine.tables.reads import Reads


class CalendarQueries:
    env: lmdb.Environment
    db: dict[str, lmdb._Database]
    buckets: list[lmdb._Database]
    # (owner, name) -> the view at the epoch it holds.
    _calendar_views: dict[tuple[str, str], calendars.View]
    # The calendar of each job that has one, and each owner's calendar
    # epoch, in memory: read whole at open and after a snapshot, changed by
    # apply as each entry is applied (`calendars_applied`), before the
    # entry's changes reach the dispatcher. So a claim reads no key: a job
    # without a calendar costs a dict lookup.
    _calendar_uses: dict[str, CalendarUse]
    _calendar_epochs: dict[str, int]

    def calendars_read(self, txn: "lmdb.Transaction[bytes]") -> None:
        uses: dict[str, CalendarUse] = {}
        epochs: dict[str, int] = {}
        for key, value in txn.cursor(db=self.db["calendars"]):
            head, rest = key[:1], bytes(key[1:])
            if head == rows.JOB:
                uses[rest.decode()] = rows.use_dec.decode(value)
            elif head == rows.EPOCH:
                epochs[rest.decode()] = int(U64.unpack(value)[0])
        self._calendar_uses, self._calendar_epochs = uses, epochs

    def calendars_applied(self, uses: list[tuple[str, CalendarUse | None]], epochs: list[tuple[str, int]]) -> None:
        """An entry's changes to jobs' calendars and owners' epochs. Applied
        before the entry commits: were its transaction to fail, the entry
        is applied again (raft's log holds it) before anything after it."""
        for job_id, use in uses:
            if use is None:
                self._calendar_uses.pop(job_id, None)
            else:
                self._calendar_uses[job_id] = use
        for owner, epoch in epochs:
            self._calendar_epochs[owner] = max(epoch, self._calendar_epochs.get(owner, 0))

    def get_calendar(self, owner: str, name: str) -> Calendar:
        with self.env.begin() as txn:
            found = rows.calendar(Reads(txn, self.db, self.buckets), owner, name)
        if found is None:
            raise errors.NotFound(f"no calendar {name}")
        return found

    def find_calendar(self, owner: str, name: str) -> Calendar | None:
        with self.env.begin() as txn:
            return rows.calendar(Reads(txn, self.db, self.buckets), owner, name)

    def list_calendars(self, owner: str, limit: int, after: str | None) -> tuple[list[Calendar], str | None]:
        """A page of the owner's calendars by name, and the cursor of the next."""
        with self.env.begin() as txn:
            found = rows.calendars_of(Reads(txn, self.db, self.buckets), owner, after, limit + 1)
        more = len(found) > limit
        found = found[:limit]
        return found, (found[-1].name if more and found else None)

    def calendar_exists(self, owner: str, name: str) -> bool:
        with self.env.begin() as txn:
            return rows.exists(Reads(txn, self.db, self.buckets), owner, name)

    def calendar_users(self, owner: str, name: str, limit: int = limits.calendar_users_named_max) -> list[str]:
        with self.env.begin() as txn:
            return rows.users(Reads(txn, self.db, self.buckets), owner, name, limit)

    def has_calendar(self, job_id: str) -> bool:
        """Whether the job uses a calendar, from memory."""
        return job_id in self._calendar_uses

    def calendar_use(self, job_id: str) -> CalendarUse | None:
        with self.env.begin() as txn:
            return rows.use_of(Reads(txn, self.db, self.buckets), job_id)

    def calendar_view(self, owner: str, name: str) -> calendars.View | None:
        """The calendar with its bases folded in, at the owner's epoch now."""
        with self.env.begin() as txn:
            return self._view_in(txn, owner, name)

    def calendar_of(self, job: Job) -> tuple[CalendarUse, calendars.View] | None:
        """The job's calendar, for the dispatcher; None without one. From
        memory: a calendar is read only when it changed (its owner's epoch
        rose) since it was last folded."""
        use = self._calendar_uses.get(job.id)
        if use is None:
            return None
        view = self._calendar_views.get((job.owner, use.name))
        if view is None or view.epoch != self._calendar_epochs.get(job.owner, 0):
            with self.env.begin() as txn:
                view = self._view_in(txn, job.owner, use.name)
        return None if view is None else (use, view)

    def _view_in(self, txn: "lmdb.Transaction[bytes]", owner: str, name: str) -> calendars.View | None:
        """The view at the epoch `txn` sees: one folded before a change
        commits carries the old epoch, so apply sends its claims back."""
        raw = txn.get(rows.EPOCH + owner.encode(), db=self.db["calendars"])
        epoch = 0 if raw is None else int(U64.unpack(raw)[0])
        found = self._calendar_views.get((owner, name))
        if found is not None and found.epoch == epoch:
            return found
        return self._fold(Reads(txn, self.db, self.buckets), owner, name, epoch)

    def _fold(self, r: Reads, owner: str, name: str, epoch: int) -> calendars.View | None:
        """The calendar with its bases folded in, kept for its epoch."""
        cache = self._calendar_views
        top = rows.calendar(r, owner, name)
        if top is None:
            return None
        view = fold(top, lambda base: rows.calendar(r, owner, base), epoch)
        if len(cache) >= limits.calendars_per_owner_max:
            cache.clear()  # bounded: views are rebuilt as claims ask for them
        cache[(owner, name)] = view
        return view


def fold(top: Calendar, base_of: Callable[[str], Calendar | None], epoch: int) -> calendars.View:
    """`top` with its bases (`base_of` a name: that calendar) folded in."""
    days: dict[int, str] = {}
    weekdays: set[int] = set()
    at: Calendar | None = top
    for _ in range(limits.calendar_base_depth_max + 1):
        if at is None:
            break
        for day in at.exclude_dates:
            days.setdefault(day, "exclude_dates")
        if at.holidays is not None:
            for day, holiday in zip(at.holidays.days, at.holidays.names, strict=True):
                days.setdefault(day, holiday)
        weekdays.update(at.exclude_weekdays)
        at = None if at.base is None else base_of(at.base)
    return calendars.View(top.timezone, days, frozenset(weekdays), epoch)
