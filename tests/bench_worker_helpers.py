"""Functions the worker-protocol tests call in a worker process (importable from tests/)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator


def count(n: int) -> Iterator[int]:
    yield from range(n)


def noisy() -> str:
    print("a library printing to stdout")  # must not corrupt the answer
    print("and to stderr", file=sys.stderr)
    return "ok"


def boom() -> None:
    raise ValueError("boom")


def die() -> None:
    print("dying now", file=sys.stderr, flush=True)
    os._exit(3)


def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def env(name: str) -> str | None:
    return os.environ.get(name)
