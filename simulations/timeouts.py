"""Bounded client calls for the in-process backend: a client that does not return in time fails.

:class:`BoundedCaller` raises :class:`ClientTimeout` in the caller when a call overruns (the round
counts that client as failed and goes on), in one of two ways:

- **main thread**, while nobody else has a ``SIGALRM`` handler: the call runs right there under a
  ``SIGALRM`` interval timer whose handler raises inside the client's code, interrupting Python code,
  a ``sleep``, a lock or an ``Event.wait`` (two ``setitimer`` calls per call, no thread hand-off);
- **otherwise**: the call runs on a persistent daemon worker thread; a worker stuck in an overrunning
  call (also inside a C extension, which a signal cannot interrupt) is abandoned, keeping what it holds,
  and the next call gets a fresh one.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["AUTO", "BoundedCaller", "ClientTimeout", "auto_limit"]

#: ``client_timeout="auto"``: each call's limit follows the calls that returned (see :func:`auto_limit`)
AUTO = "auto"
#: seconds a call may take before any call has returned (data loading, model building, first steps)
AUTO_FIRST_S = 600.0
#: after that: this many times the slowest call that returned so far ...
AUTO_FACTOR = 10.0
#: ... but never less than this many seconds
AUTO_FLOOR_S = 60.0


def auto_limit(slowest: float | None) -> float:
    """The ``"auto"`` limit of the next call when the slowest call that returned took ``slowest``
    seconds (None: none has returned yet): ``max(AUTO_FLOOR_S, AUTO_FACTOR * slowest)``, or
    ``AUTO_FIRST_S`` before the first. A client that hangs then costs about ten rounds' worth of
    its own work, not a fixed hour."""
    return AUTO_FIRST_S if slowest is None else max(AUTO_FLOOR_S, AUTO_FACTOR * float(slowest))


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
    timeout : float | "auto" | None
        Seconds one call may take, > 0; ``"auto"``: a limit that follows the calls that returned
        (:func:`auto_limit`: 10x the slowest so far, at least 60 s; 600 s before the first);
        None runs calls directly with no limit.
    use_signal : bool (default: True)
        Allow the ``SIGALRM`` timer for calls made on the main thread (see the module docstring);
        False always uses the worker thread.
    """

    def __init__(self, timeout: float | str | None, use_signal: bool = True) -> None:
        if timeout is not None and timeout != AUTO and not (
                isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0):
            raise ValueError(f"client timeout must be a number of seconds > 0, 'auto' or None, got {timeout!r}")
        self.auto = timeout == AUTO
        self.timeout = None if timeout is None or self.auto else float(timeout)
        self.slowest: float | None = None  # the slowest call that returned ("auto")
        self.use_signal = bool(use_signal)
        self._inbox: queue.SimpleQueue[_Call | None] | None = None
        self._armed: str | None = None  # what the SIGALRM timer is guarding right now
        self._previous_handler: Any = None
        self.abandoned = 0  # worker threads left behind in a call that overran
        self.interrupted = 0  # calls stopped by the timer

    # ------------------------------------------------------------------ main thread: SIGALRM
    def _on_alarm(self, signum, frame) -> None:
        what = self._armed
        if what is not None:  # the call is still running: stop it here
            self._armed = None
            raise ClientTimeout(f"{what} did not return within the client timeout of {self.timeout:g} s")

    def _signal_ready(self) -> bool:
        if not self.use_signal or threading.current_thread() is not threading.main_thread():
            return False
        if self._previous_handler is not None:
            return signal.getsignal(signal.SIGALRM) == self._on_alarm
        current = signal.getsignal(signal.SIGALRM)
        if current not in (signal.SIG_DFL, None):
            return False  # someone else uses SIGALRM: do not take it over
        self._previous_handler = signal.SIG_DFL if current is None else current
        signal.signal(signal.SIGALRM, self._on_alarm)
        return True

    def _call_with_alarm(self, fn: Callable[[], Any], what: str) -> Any:
        self._armed = what
        signal.setitimer(signal.ITIMER_REAL, self.timeout)
        try:
            return fn()
        except ClientTimeout:
            self.interrupted += 1
            raise
        finally:
            self._armed = None  # a late alarm now does nothing
            signal.setitimer(signal.ITIMER_REAL, 0)

    # ------------------------------------------------------------------ other threads: a worker
    def _worker_inbox(self) -> "queue.SimpleQueue[_Call | None]":
        if self._inbox is None:
            inbox: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
            threading.Thread(target=_work, args=(inbox,), name="inprocess-client", daemon=True).start()
            self._inbox = inbox
        return self._inbox

    def _call_on_worker(self, fn: Callable[[], Any], what: str) -> Any:
        call = _Call(fn)
        self._worker_inbox().put(call)
        if not call.done.wait(self.timeout):
            self._inbox = None  # the stuck worker keeps its own inbox; the next call starts a new one
            self.abandoned += 1
            raise ClientTimeout(f"{what} did not return within the client timeout of {self.timeout:g} s")
        if call.error is not None:
            raise call.error
        return call.value

    # ------------------------------------------------------------------ API
    def __call__(self, fn: Callable[[], Any], what: str = "client call") -> Any:
        """``fn()``, or :class:`ClientTimeout` after ``timeout`` seconds."""
        if self.auto:
            self.timeout = auto_limit(self.slowest)
        if self.timeout is None:
            return fn()
        start = time.perf_counter()
        value = self._call_with_alarm(fn, what) if self._signal_ready() else self._call_on_worker(fn, what)
        if self.auto:
            took = time.perf_counter() - start
            self.slowest = took if self.slowest is None else max(self.slowest, took)
        return value

    def close(self) -> None:
        """Give ``SIGALRM`` back and let the current worker thread finish (an abandoned one stays
        where it is)."""
        if self._previous_handler is not None:
            if signal.getsignal(signal.SIGALRM) == self._on_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, self._previous_handler)
            self._previous_handler = None
        if self._inbox is not None:
            self._inbox.put(None)
            self._inbox = None
