"""The `calendars` table (docs/semantics.md "Calendars"): one table of
rows told apart by their first byte, so that a job's record keeps the
bytes it had before calendars existed:

- b"c" owner NUL name: the calendar (`records.Calendar`);
- b"u" owner NUL name NUL job ID: a job that uses it (empty value);
- b"j" job ID: the job's calendar (`records.CalendarUse`);
- b"e" owner: the owner's calendar epoch (u64), which every change of
  one of the owner's calendars or of a job's calendar raises. A claim
  carries the epoch its node decided with; apply takes the decision only
  at the same epoch, so a change reaches every slot not yet claimed with
  no scan of the jobs that use the calendar.
"""

from tempo.engine.records import Calendar, CalendarUse, Decoder
from tempo.engine.tables.layout import U64, enc, must
from tempo.engine.tables.reads import Reads

CALENDAR = b"c"
USER = b"u"
JOB = b"j"
EPOCH = b"e"
calendar_dec = Decoder(Calendar)
use_dec = Decoder(CalendarUse)


def calendar_key(owner: str, name: str) -> bytes:
    return CALENDAR + owner.encode() + b"\0" + name.encode()


def _user_head(owner: str, name: str) -> bytes:
    return USER + owner.encode() + b"\0" + name.encode() + b"\0"


def calendar(r: Reads, owner: str, name: str) -> Calendar | None:
    raw = r.txn.get(calendar_key(owner, name), db=r.calendars)
    return None if raw is None else calendar_dec.decode(raw)


def exists(r: Reads, owner: str, name: str) -> bool:
    """Whether the calendar is there, without decoding its dates."""
    return r.txn.get(calendar_key(owner, name), db=r.calendars) is not None


def calendars_of(r: Reads, owner: str, after: str | None = None, limit: int | None = None) -> list[Calendar]:
    """The owner's calendars by name, after the name `after`, at most `limit`."""
    head = CALENDAR + owner.encode() + b"\0"
    cur = r.txn.cursor(db=r.calendars)
    start = head if after is None else head + after.encode() + b"\0"
    found: list[Calendar] = []
    ok = cur.set_range(start)
    while ok and (limit is None or len(found) < limit):
        key = bytes(cur.key())
        if not key.startswith(head):
            break
        found.append(calendar_dec.decode(cur.value()))
        ok = cur.next()
    return found


def put_calendar(r: Reads, cal: Calendar) -> None:
    r.txn.put(calendar_key(cal.owner, cal.name), enc.encode(cal), db=r.calendars)


def drop_calendar(r: Reads, owner: str, name: str) -> None:
    must(r.txn.delete(calendar_key(owner, name), db=r.calendars), "a calendar apply deletes is there")


def users(r: Reads, owner: str, name: str, limit: int) -> list[str]:
    """The IDs of up to `limit` jobs that use the calendar, ascending."""
    head = _user_head(owner, name)
    cur = r.txn.cursor(db=r.calendars)
    found: list[str] = []
    ok = cur.set_range(head)
    while ok and len(found) < limit:
        key = bytes(cur.key())
        if not key.startswith(head):
            break
        found.append(key[len(head):].decode())
        ok = cur.next()
    return found


def use_of(r: Reads, job_id: str) -> CalendarUse | None:
    raw = r.txn.get(JOB + job_id.encode(), db=r.calendars)
    return None if raw is None else use_dec.decode(raw)


def bind(r: Reads, owner: str, job_id: str, use: CalendarUse) -> None:
    """The job uses `use.name` (any calendar it used before is let go)."""
    unbind(r, owner, job_id)
    r.txn.put(JOB + job_id.encode(), enc.encode(use), db=r.calendars)
    r.txn.put(_user_head(owner, use.name) + job_id.encode(), b"", db=r.calendars)


def unbind(r: Reads, owner: str, job_id: str) -> bool:
    """The job uses no calendar; answers whether it used one."""
    old = use_of(r, job_id)
    if old is None:
        return False
    r.txn.delete(JOB + job_id.encode(), db=r.calendars)
    must(r.txn.delete(_user_head(owner, old.name) + job_id.encode(), db=r.calendars), "a use has its user row")
    return True


def epoch(r: Reads, owner: str) -> int:
    raw = r.txn.get(EPOCH + owner.encode(), db=r.calendars)
    return 0 if raw is None else int(U64.unpack(raw)[0])


def raise_epoch(r: Reads, owner: str) -> int:
    """The owner's epoch, one higher; answers the new one."""
    raised = epoch(r, owner) + 1
    r.txn.put(EPOCH + owner.encode(), U64.pack(raised), db=r.calendars)
    return raised
