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
- a measurement runs on a lease that every call for its key renews: one that no call has asked
  about for LEASE_S is abandoned (its requests in flight cancelled, no verdict, no further
  request sent), so deleting the XR stops it within LEASE_S + CHECK_S of the last call. Crossplane
  calls no function for an XR being deleted, and calls every MEASURE_TTL_S (3 s) while one
  measures; an abandoned measurement of an XR that is still there is started again by its next
  call;
- a call for an XR being deleted (``cancel``) abandons its measurements at once;
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
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, NamedTuple

KEEP_VERDICTS = 256
# A measurement no call has asked about for this long is abandoned: over two response TTLs
# (3 s) of the gate, so a reconcile or two that come late do not abandon a live XR's.
LEASE_S = 7.0
CHECK_S = 0.5  # how often a running measurement checks its lease

log = logging.getLogger(__name__)

Gate = dict[str, Any]  # what goes into status.canary.gate
Measure = Callable[[], Coroutine[Any, Any, Gate]]
Failed = Callable[[str], Gate]  # a failed verdict with this reason


class Key(NamedTuple):
    xr: str  # the XR's uid (its namespace/name where it has none, as in a render)
    revision: str
    run: str | None


class AbandonedError(Exception):
    """A measurement whose lease ran out (no call asked about it: its XR is gone)."""


class Measurements:
    """The measurements of one function process: running ones and finished verdicts."""

    def __init__(
        self, keep: int = KEEP_VERDICTS, lease_s: float = LEASE_S, check_s: float = CHECK_S
    ) -> None:
        self._keep = keep
        self._lease_s, self._check_s = lease_s, check_s
        self._asked: dict[Key, float] = {}  # running key -> when a call last asked about it
        self.abandoned = 0  # measurements abandoned (lease out, or cancelled by a deletion)
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
            self._asked[key] = time.monotonic()
            if key not in self._running:
                self._cancel_others(key)
                future = asyncio.run_coroutine_threadsafe(
                    self._leased(key, measure), self._event_loop()
                )
                self._running[key] = (future, failed)
                self.started += 1
            return None

    def cancel(self, xr: str) -> int:
        """Abandons every measurement of the XR (it is being deleted): its requests in flight
        are cancelled and no other is sent. Returns how many were running."""
        with self._lock:
            cancelled = 0
            for key, (future, _) in list(self._running.items()):
                if key.xr == xr:
                    future.cancel()
                    del self._running[key]
                    self._asked.pop(key, None)
                    cancelled += 1
            self.abandoned += cancelled
            return cancelled

    async def _leased(self, key: Key, measure: Measure) -> Gate:
        """``measure()``, abandoned once its lease runs out."""
        task = asyncio.ensure_future(measure())
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self._check_s)
                if done:
                    return task.result()
                with self._lock:
                    idle = time.monotonic() - self._asked.get(key, 0.0)
                    if idle > self._lease_s:
                        self.abandoned += 1
                if idle > self._lease_s:
                    task.cancel()
                    log.info("smoke test %s abandoned: no call for %.1f s", key, idle)
                    raise AbandonedError(f"no call asked about it for {idle:.1f} s")
        finally:
            if not task.done():
                task.cancel()

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
            self._asked.clear()
            self._done.clear()
            self.started = 0
            self.abandoned = 0

    def _collect(self) -> None:
        """Moves every finished measurement's verdict into the cache, also those of XRs nobody
        asks about any more (deleted ones), so nothing piles up."""
        for key, (future, failed) in list(self._running.items()):
            if not future.done():
                continue
            del self._running[key]
            self._asked.pop(key, None)
            if future.cancelled():
                continue  # superseded: nobody waits for it
            error = future.exception()
            if isinstance(error, AbandonedError):
                continue  # its XR is gone, or its next call measures again
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
                self._asked.pop(other, None)

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
