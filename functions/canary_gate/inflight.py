"""Smoke tests that outlive the RunFunction call that starts them.

A smoke test takes seconds; a composition function should answer in milliseconds, and
Crossplane writes the XR's status only after the whole pipeline answers. So the gate starts
the measurement in the background of the function process and answers at once (state
Measuring, a short response TTL); a later reconcile, the first after the measurement
finished, collects the verdict and writes it. Rules, per key (XR, revision, run):

- at most one measurement runs; concurrent or repeated calls share it;
- a finished verdict is kept (a bounded, least-recently-used cache of KEEP_VERDICTS) until
  the caller says the XR's status holds it, so a response Crossplane failed to apply does not
  cause a second measurement;
- starting a measurement for an XR cancels the XR's measurements of other revisions or runs
  (the seed's "cancel the running workflow, start a fresh one");
- nothing survives a restart of the process: with no verdict ever recorded, the next call
  measures again.

Measurements run on one event loop in a daemon thread of their own, not on the caller's: the
gRPC server's loop serves calls, `crossplane render`-style callers (`plnt render`, tests) run
each call in a loop of its own (`asyncio.run`) that ends with the call. A measurement that
raises is a failed verdict (the gate fails closed).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, NamedTuple

KEEP_VERDICTS = 256

Gate = dict[str, Any]  # what goes into status.canary.gate
Measure = Callable[[], Coroutine[Any, Any, Gate]]
Failed = Callable[[str], Gate]  # a failed verdict with this reason


class Key(NamedTuple):
    xr: str  # the XR's uid (its namespace/name where it has none, as in a render)
    revision: str
    run: str | None


class Measurements:
    """The measurements of one function process: running ones and finished verdicts."""

    def __init__(self, keep: int = KEEP_VERDICTS) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        # key -> (the running measurement, how to fail closed if it raises)
        self._running: dict[Key, tuple[concurrent.futures.Future[Gate], Failed]] = {}
        self._done: collections.OrderedDict[Key, Gate] = collections.OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started = 0  # measurements started in this process (for tests and benchmarks)

    def poll(self, key: Key, measure: Measure, failed: Failed) -> Gate | None:
        """The verdict for `key` once its measurement has finished, else None: the measurement
        is started (once) with `measure`. `failed` turns an error into a failed verdict."""
        with self._lock:
            self._collect()
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            if key not in self._running:
                self._cancel_others(key)
                future = asyncio.run_coroutine_threadsafe(measure(), self._event_loop())
                self._running[key] = (future, failed)
                self.started += 1
            return None

    def recorded(self, key: Key) -> None:
        """The XR's status holds the verdict for `key`: the cache need not keep it any more."""
        with self._lock:
            self._done.pop(key, None)

    def running(self) -> list[Key]:
        with self._lock:
            return [k for k, (future, _) in self._running.items() if not future.done()]

    def wait(self, timeout: float) -> bool:
        """Blocks until every running measurement has finished (True) or `timeout` passed."""
        with self._lock:
            futures = [future for future, _ in self._running.values()]
        done, _ = concurrent.futures.wait(futures, timeout=timeout)
        return len(done) == len(futures)

    def clear(self) -> None:
        """Forgets everything, cancelling what runs (a fresh process, for tests)."""
        with self._lock:
            for future, _ in self._running.values():
                future.cancel()
            self._running.clear()
            self._done.clear()
            self.started = 0

    def _collect(self) -> None:
        """Moves every finished measurement's verdict into the cache, also those of XRs nobody
        asks about any more (deleted ones), so nothing piles up."""
        for key, (future, failed) in list(self._running.items()):
            if not future.done():
                continue
            del self._running[key]
            if future.cancelled():
                continue  # superseded: nobody waits for it
            error = future.exception()
            if error is not None:
                self._remember(
                    key, failed(f"the smoke test could not run ({type(error).__name__})")
                )
            else:
                self._remember(key, future.result())

    def _cancel_others(self, key: Key) -> None:
        for other, (future, _) in list(self._running.items()):
            if other.xr == key.xr and other != key:
                future.cancel()
                del self._running[other]

    def _remember(self, key: Key, gate: Mapping[str, Any]) -> None:
        self._done[key] = dict(gate)
        while len(self._done) > self._keep:
            self._done.popitem(last=False)

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="canary-gate-measurements", daemon=True
            )
            thread.start()
            self._loop = loop
        return self._loop
