"""``docmultilock bench``: every lock operation measured beside the raw pymongo floor.

The floor (``_floor``) is the lock a user would write by hand: one ``find_one_and_update``
with a small conditional pipeline. Every scenario runs both, in the same run on the same
server, and reports docmultilock's figure, the floor's and their ratio::

    report = run_bench(BenchSettings(duration=5.0, scenarios=frozenset({1, 2})))
    print(render_table(report))

Modules: ``_floor`` (the floor), ``_bed`` (clients and twin collections), ``_measure``
(alternating timing loops), ``_commands`` (scenario 1), ``_single`` (2, 3, 6, 7, 8),
``_shape`` (each command's size, counted without a server, for 2 and 6), ``_contended``
and ``_worker`` (4, 5, 8), ``_capacity`` (9: keep-alive capacity), ``_flavours`` (10:
async beside sync), ``_handoff`` (11 to 13: waiting), ``_report`` (rows, table, JSON, live
line), ``_run`` (which measurement gives which scenario, one server each). Worker processes
run in ``docmultilock._workers``, the harness the demo uses too; ``_shape`` makes each
manager's core as the manager does (``_parts.Parts``).
"""

from docmultilock._bench._report import Progress, Report, Row, render_json, render_table
from docmultilock._bench._run import FLOORED, SCENARIOS, BenchSettings, KeepAlive, run_bench

__all__ = [
    "FLOORED",
    "SCENARIOS",
    "BenchSettings",
    "KeepAlive",
    "Progress",
    "Report",
    "Row",
    "render_json",
    "render_table",
    "run_bench",
]
