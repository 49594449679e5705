"""What the bench prints: rows with their targets, the table, the JSON, the live line."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, TextIO

__all__ = ["Bound", "Progress", "Report", "Row", "render_json", "render_table"]


@dataclass(frozen=True)
class Bound:
    """A target: ``of`` (the ratio, or docmultilock's own figure) compared with ``value``."""

    op: Literal["<", "<=", ">=", "==", ">"]
    value: float
    of: Literal["ratio", "docmultilock"] = "ratio"

    def holds(self, figure: float | None) -> bool | None:
        if figure is None:
            return None
        if self.op == "<":
            return figure < self.value
        if self.op == "<=":
            return figure <= self.value
        if self.op == ">=":
            return figure >= self.value
        if self.op == ">":
            return figure > self.value
        return round(figure, 6) == self.value

    def __str__(self) -> str:
        subject = "ratio" if self.of == "ratio" else "value"
        return f"{subject} {self.op} {self.value:g}"


@dataclass(frozen=True)
class Row:
    """One line of the table: docmultilock's figure, the floor's, and their ratio."""

    scenario: int
    name: str
    unit: str
    docmultilock: float
    floor: float | None
    target: str = ""
    met: bool | None = None
    detail: str = ""

    @property
    def ratio(self) -> float | None:
        """The ratio: docmultilock's figure over the floor's."""
        if self.floor is None or self.floor == 0:
            return None
        return self.docmultilock / self.floor

    @classmethod
    def make(
        cls,
        scenario: int,
        name: str,
        unit: str,
        docmultilock: float,
        floor: float | None,
        bound: Bound | None = None,
        detail: str = "",
    ) -> Row:
        """A row, with ``met`` judged against ``bound`` when there is one."""
        row = cls(scenario, name, unit, docmultilock, floor, detail=detail)
        if bound is None:
            return row
        figure = row.ratio if bound.of == "ratio" else docmultilock
        return replace(row, target=str(bound), met=bound.holds(figure))

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


@dataclass
class Report:
    """Everything one run found: where it ran, and the rows."""

    server: str
    embedded: bool
    cpus: int
    duration: float
    command: str
    versions: dict[str, str]
    #: On an embedded server given by URI (not a fresh one per measurement): the writes it
    #: had seen before the run, as it slows down as they accumulate. ``None`` otherwise.
    writes_before: int | None = None
    collections: dict[str, str] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def render_table(report: Report) -> str:
    """The table for people, with a header naming the server and the machine."""
    kind = "the embedded server" if report.embedded else "not the embedded server"
    if report.writes_before is not None:
        kind += (
            f", which had seen {report.writes_before:,} writes before this run (it slows "
            "down as writes accumulate: run without --uri for a fresh one per scenario)"
        )
    lines = [
        f"docmultilock bench: {report.command}",
        f"server: {report.server}, {kind}",
        f"client: {report.cpus} CPU cores, "
        + ", ".join(f"{name} {version}" for name, version in report.versions.items()),
        f"{report.duration:g} s per scenario; ratio = docmultilock / floor",
        "",
    ]
    header = ("#", "row", "unit", "docmultilock", "floor", "ratio", "target", "met", "note")
    cells = [header]
    for row in report.rows:
        met = {True: "yes", False: "MISSED", None: ""}[row.met]
        cells.append(
            (
                str(row.scenario),
                row.name,
                row.unit,
                _figure(row.docmultilock),
                _figure(row.floor),
                _figure(row.ratio),
                row.target,
                met,
                row.detail,
            )
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    right = {3, 4, 5}
    for line in cells:
        text = "  ".join(
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        )
        lines.append(text.rstrip())
    if report.collections:
        lines += ["", "collection sizes:"]
        lines += [f"  {name}: {size}" for name, size in report.collections.items()]
    return "\n".join(lines) + "\n"


def render_json(report: Report) -> str:
    """The report for machines."""
    data = asdict(report)
    data["rows"] = [row.as_dict() for row in report.rows]
    return json.dumps(data, indent=2) + "\n"


class Progress:
    """A live line on stderr per scenario: rewritten in place on a terminal."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.live = self.stream.isatty()
        self._title = ""
        self._width = 0
        self._shown_at = 0.0

    def start(self, title: str) -> None:
        self._title = title
        self._shown_at = 0.0
        self.show("", force=True)

    def show(self, text: str, *, force: bool = False) -> None:
        """Show ``text`` after the scenario's title (on a terminal; elsewhere, start and end)."""
        now = time.monotonic()
        if not force and (not self.live or now - self._shown_at < 0.1):
            return
        self._shown_at = now
        line = f"{self._title}  {text}".rstrip()
        if self.live:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def bar(self, done: float, text: str = "") -> None:
        """Show a bar for the fraction ``done`` of the scenario."""
        filled = round(max(0.0, min(1.0, done)) * 20)
        self.show(f"[{'#' * filled}{'.' * (20 - filled)}] {text}")

    def end(self, text: str = "done") -> None:
        self.show(text, force=True)
        if self.live:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
