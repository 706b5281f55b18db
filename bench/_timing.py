"""Thread-CPU clocks around a function, for the in-process harnesses
(bench/perrun.py, bench/percreate.py): each call adds the CPU seconds of the
thread that ran it to `meter.add(name, seconds)`."""

import time
from collections.abc import Callable
from typing import Any


def timed(meter: Any, name: str, fn: Callable) -> Callable:
    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            meter.add(name, time.thread_time() - start)

    return wrapper


def timed_async(meter: Any, name: str, fn: Callable) -> Callable:
    async def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return await fn(*args, **kwargs)
        finally:
            meter.add(name, time.thread_time() - start)

    return wrapper
