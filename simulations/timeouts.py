"""Bounded client calls for the in-process backend: a client that does not return in time fails.

:class:`BoundedCaller` runs each client call on one persistent daemon worker thread and waits at
most ``timeout`` seconds for it. A call that overruns raises :class:`ClientTimeout` in the
caller (the round counts that client as failed and goes on); the worker that is stuck in it is
abandoned (a daemon thread never blocks interpreter exit) and the next call gets a fresh worker.

Python cannot stop a thread, so an abandoned call keeps whatever it holds (its pooled model, a
CPU core if it spins). The hang no longer blocks the run, which is what the timeout promises.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["BoundedCaller", "ClientTimeout"]


class ClientTimeout(TimeoutError):
    """A client call did not return within the per-round client timeout."""


class _Call:
    __slots__ = ("fn", "done", "value", "error")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


def _work(inbox: "queue.SimpleQueue[_Call | None]") -> None:
    while True:
        call = inbox.get()
        if call is None:
            return
        try:
            call.value = call.fn()
        except BaseException as err:  # handed back to the caller's thread
            call.error = err
        finally:
            call.done.set()


class BoundedCaller:
    """Run zero-argument callables with a time limit.

    Parameters
    ----------
    timeout : float | None
        Seconds one call may take, > 0. None runs calls directly in the caller's thread with no
        limit (no thread hand-off at all).
    """

    def __init__(self, timeout: float | None) -> None:
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"client timeout must be a number of seconds > 0 or None, got {timeout!r}")
        self.timeout = None if timeout is None else float(timeout)
        self._inbox: queue.SimpleQueue[_Call | None] | None = None
        self.abandoned = 0  # workers left behind in a call that overran

    def _worker_inbox(self) -> "queue.SimpleQueue[_Call | None]":
        if self._inbox is None:
            inbox: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
            threading.Thread(target=_work, args=(inbox,), name="inprocess-client", daemon=True).start()
            self._inbox = inbox
        return self._inbox

    def __call__(self, fn: Callable[[], Any], what: str = "client call") -> Any:
        """``fn()``, or :class:`ClientTimeout` after ``timeout`` seconds."""
        if self.timeout is None:
            return fn()
        call = _Call(fn)
        self._worker_inbox().put(call)
        if not call.done.wait(self.timeout):
            self._inbox = None  # the stuck worker keeps its own inbox; the next call starts a new one
            self.abandoned += 1
            raise ClientTimeout(f"{what} did not return within the client timeout of {self.timeout:g} s")
        if call.error is not None:
            raise call.error
        return call.value

    def close(self) -> None:
        """Let the current worker thread finish (an abandoned one stays where it is)."""
        if self._inbox is not None:
            self._inbox.put(None)
            self._inbox = None
