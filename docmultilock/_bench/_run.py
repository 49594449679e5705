"""Run the selected scenarios, each on a fresh server (or the one given), and report.

Scenarios share measurements: the uncontended loop gives scenarios 2, 3 and the first half
of 8, the contended race gives 4 and the second half of 8. Scenarios 9 and 10 have no floor:
9 counts the locks one process keeps alive, 10 sets the async flavour beside the sync one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version

from docmultilock._bench import (
    _capacity,
    _commands,
    _contended,
    _flavours,
    _handoff,
    _sets,
    _single,
)
from docmultilock._bench._bed import Context, KeepAlive, Outcome, connect, server_version
from docmultilock._bench._report import Progress, Report
from docmultilock._server_wear import writes_seen
from docmultilock.testing import URI_VARIABLE, EmbeddedServer

__all__ = ["FLOORED", "SCENARIOS", "BenchSettings", "KeepAlive", "run_bench"]

#: Every scenario, by number, with its title.
SCENARIOS = {
    1: "commands per operation",
    2: "uncontended cycles per second",
    3: "client CPU per cycle",
    4: "contended: 4 processes, 1 document",
    5: "spread: 4 processes, 100 documents",
    6: "readers at scale",
    7: "document size",
    8: "latency percentiles",
    9: "keep-alive capacity",
    10: "async beside sync",
    11: "hand-off latency",
    12: "commands per grant while waiting",
    13: "fairness: 4 processes, 1 document",
    14: "lock sets: 8 processes, random pairs of 10 documents",
}

#: The scenarios whose rows set docmultilock beside the raw pymongo floor.
FLOORED = frozenset(range(1, 9))


def _commands_outcome(context: Context) -> Outcome:
    counts, collections = _commands.count_commands(context.uri)
    return Outcome(_commands.rows(counts), collections)


#: The measurements, each with the scenarios it gives figures for.
MEASUREMENTS: list[tuple[str, frozenset[int], Callable[[Context], Outcome]]] = [
    ("commands per operation", frozenset({1}), _commands_outcome),
    ("uncontended, 1 client, 1 document", frozenset({2, 3, 8}), _single.uncontended),
    ("contended, 4 processes, 1 document", frozenset({4, 8}), _contended.contended),
    ("spread, 4 processes, 100 documents", frozenset({5}), _contended.spread),
    ("readers at scale", frozenset({6}), _single.readers),
    ("document size", frozenset({7}), _single.size),
    ("keep-alive capacity, 1 process", frozenset({9}), _capacity.keepalive_capacity),
    ("async beside sync", frozenset({10}), _flavours.async_beside_sync),
    ("hand-off, 1 process, 1 document", frozenset({11, 12}), _handoff.handoff),
    ("fairness, 4 processes, 1 document", frozenset({13}), _handoff.fairness),
    ("lock sets, 8 processes, 10 documents", frozenset({14}), _sets.sets),
]


@dataclass(frozen=True)
class BenchSettings:
    """What to run: against which server (``None``: a fresh embedded one per measurement)."""

    uri: str | None = None
    duration: float = 10.0
    scenarios: frozenset[int] = field(default_factory=lambda: frozenset(SCENARIOS))
    command: str = "docmultilock bench"
    keepalive: KeepAlive = field(default_factory=KeepAlive)


@contextlib.contextmanager
def _embedded() -> Iterator[str]:
    with EmbeddedServer() as server:
        yield server.uri


def _given(uri: str | None) -> str | None:
    """The server every measurement runs on, if one is given; else each gets a fresh one."""
    return uri or os.environ.get(URI_VARIABLE)


def _servers(uri: str | None) -> Callable[[], contextlib.AbstractContextManager[str]]:
    """Each measurement's server: the one given, else a fresh embedded one."""
    given = _given(uri)
    if given:
        return lambda: contextlib.nullcontext(given)
    return _embedded


def run_bench(settings: BenchSettings, progress: Progress | None = None) -> Report:
    """Run the selected scenarios and return what they measured (progress on stderr)."""
    progress = Progress() if progress is None else progress
    servers = _servers(settings.uri)
    chosen = [m for m in MEASUREMENTS if m[1] & settings.scenarios]
    report: Report | None = None
    for number, (title, _, measure) in enumerate(chosen, 1):
        progress.start(f"[{number}/{len(chosen)}] {title}")
        if _given(settings.uri) is None:
            progress.show("starting the server ...", force=True)
        with servers() as uri:
            if report is None:
                with connect(uri) as client:
                    server, embedded = server_version(client)
                    worn = embedded and _given(settings.uri) is not None
                    writes_before = writes_seen(client) if worn else None
                report = Report(
                    server=server,
                    embedded=embedded,
                    cpus=os.cpu_count() or 1,
                    duration=settings.duration,
                    command=settings.command,
                    versions={name: version(name) for name in ("docmultilock", "pymongo")},
                    writes_before=writes_before,
                )
            context = Context(uri, report.embedded, settings.duration, progress, settings.keepalive)
            outcome = measure(context)
        progress.end()
        report.collections[title] = outcome.collections
        report.rows += [row for row in outcome.rows if row.scenario in settings.scenarios]
    assert report is not None, "no scenario chosen"
    report.rows.sort(key=lambda row: row.scenario)
    return report
