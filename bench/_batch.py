"""Batch creates as the benches make and read them (bench/create.py,
bench/scale.py, bench/percreate.py).

- The jobs' times spread over a span, and their text: not
  `tempo.clock.iso_from_ms`, whose cache would then hold the times the
  server's views format.
- The reply read for each item's status only: msgspec still parses the
  whole reply but skips the job views' fields without making objects of
  them; decoding 1,000 views into dicts cost the client about 8 µs a job,
  as much CPU as the server spends on it, on the cores the server shares.
"""

import time

import msgspec


def spread_at_ms(n: int, jobs: int, start_ms: int, span_ms: int) -> int:
    """The due time of the n-th of `jobs` jobs spread over `span_ms` from
    `start_ms`, in an order that scatters neighbours (a stride prime to
    most counts), as a store filled by many clients would see them."""
    return start_ms + (n * 7919 % jobs) * span_ms // jobs


def iso(at_ms: int) -> str:
    seconds, millis = divmod(at_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class _ItemStatus(msgspec.Struct):
    status: int


class _BatchStatuses(msgspec.Struct):
    results: list[_ItemStatus]


_reply = msgspec.json.Decoder(_BatchStatuses)


def statuses(body: bytes) -> list[int]:
    """Each item's status, in order, from a `POST /v1/jobs/batch` JSON reply."""
    return [item.status for item in _reply.decode(body).results]
