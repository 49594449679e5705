"""The ``docmultilock`` command line: ``demo``, ``bench``, and the operators' commands.

``inspect``, ``break``, ``ensure-indexes`` and ``doctor`` are in ``_cli_ops``, with their
exit statuses.

:func:`main` parses the arguments and runs the subcommand. It returns the exit status and
never exits itself (the console script and ``python -m docmultilock`` do)::

    docmultilock demo                        # on a fresh embedded server
    docmultilock demo --uri mongodb://db.example:27017 --workers 8 --seconds 20
    docmultilock bench                       # every scenario beside the raw pymongo floor
    docmultilock bench --scenarios 1,2 --duration 5 --json
    docmultilock bench --scenarios 9 --keepalive-locks 10000 --keepalive-seconds 60

Exit status: 0 when all went well, 1 when the command failed (for ``demo``: any
mutual-exclusion violation or worker error; for ``bench``: the server or a worker failed),
2 for a usage error, 130 on Ctrl-C. A bench target missed is reported, not an error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from typing import Any

from docmultilock import __version__
from docmultilock._cli_args import add_subcommand, hosts, seconds

# Nothing here imports pymongo or the library at module level: ``docmultilock --version``
# answers from this module alone, and each command imports what it runs.

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """An argument parser whose description may be computed only when help is shown.

    :meth:`describe` keeps the bench's modules (a quarter of the package) out of every run of
    ``demo``: they are imported only when ``bench`` runs or its help is printed.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._describe: Callable[[], str] | None = None

    def describe(self, describe: Callable[[], str]) -> None:
        """Have ``describe()`` make the description, when the help is first shown."""
        self._describe = describe

    def format_help(self) -> str:
        if self._describe is not None:
            self.description, self._describe = self._describe(), None
        return super().format_help()


def _count(low: int, high: int) -> Callable[[str], int]:
    """Make an argparse type for a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {value}")
        return value

    return parse


def _count_option(
    parser: argparse.ArgumentParser, flag: str, what: str, low: int, high: int, *, default: int
) -> None:
    """Add ``flag``: a whole number from ``low`` to ``high``, both named in its help."""
    text = f"{what} ({low}-{high}; default {default})"
    parser.add_argument(flag, type=_count(low, high), default=default, metavar="N", help=text)


def _seconds_option(parser: argparse.ArgumentParser, flag: str, what: str, default: float) -> None:
    """Add ``flag``: seconds, with a ``default`` named in its help."""
    parser.add_argument(
        flag, type=seconds, default=default, metavar="S", help=f"{what} (default {default:g})"
    )


def _add_server_option(parser: argparse.ArgumentParser) -> None:
    from docmultilock.testing import URI_VARIABLE

    parser.add_argument(
        "--uri",
        help=(
            f"MongoDB connection string to run against; by default ${URI_VARIABLE} if set, "
            "else a fresh embedded server (needs the 'embedded' extra)"
        ),
    )


#: Each subcommand's help line and description (the bench's is made when its help is shown).
TEXTS = {
    "demo": (
        "race worker processes for read and write locks and check mutual exclusion",
        "Start worker processes that take read and write locks on a few documents: writers "
        "change a document in two steps under the lock, readers check they never see it "
        "half-written. Shows live progress, then a summary; exits 1 on any mutual-exclusion "
        "violation or worker error.",
    ),
    "bench": ("measure every lock operation beside the raw pymongo floor", ""),
    "server": (
        "run an embedded test server to try the library and the CLI on",
        "Start the embedded MongoDB-compatible test server (needs the 'embedded' extra), "
        "print its URI on stdout, and serve until Ctrl-C. For development and trying the "
        "commands out, never production. It slows down as writes accumulate (see "
        "docs/server.md): restart it before measuring anything on it.",
    ),
}


def _command(
    commands: argparse._SubParsersAction[_Parser],
    name: str,
    handler: Handler,
    failures: tuple[type[Exception], ...] = (),
) -> _Parser:
    """Add the subcommand ``name`` run by ``handler``; its ``failures`` print one line, exit 1.

    A server that cannot be started is always among them.
    """
    from docmultilock.testing import EmbeddedServerError

    failures = (EmbeddedServerError, *failures)
    parser: _Parser = add_subcommand(
        commands, name, TEXTS[name], handler=handler, failures=failures
    )
    return parser


@contextlib.contextmanager
def _server(uri: str | None) -> Iterator[tuple[str, str]]:
    """Yield the URI to use and how to name it in output (hosts only, no credentials)."""
    from docmultilock.testing import URI_VARIABLE, mongodb_uri

    if uri:
        yield uri, hosts(uri)
        return
    given = os.environ.get(URI_VARIABLE)
    if not given:
        print("starting the embedded server ...", file=sys.stderr, flush=True)
    with mongodb_uri() as found:
        yield (
            found,
            f"{hosts(found)}, from ${URI_VARIABLE}" if given else f"embedded, {hosts(found)}",
        )


def _run_demo(args: argparse.Namespace) -> int:
    from docmultilock._demo import DemoSettings, run_demo

    with _server(args.uri) as (uri, where):
        settings = DemoSettings(
            uri=uri,
            server=where,
            workers=args.workers,
            documents=args.documents,
            seconds=args.seconds,
            seed=args.seed,
        )
        return run_demo(settings)


def _add_demo(commands: argparse._SubParsersAction[_Parser]) -> None:
    demo = _command(commands, "demo", _run_demo)
    _add_server_option(demo)
    _count_option(demo, "--workers", "worker processes", 1, 64, default=4)
    _count_option(demo, "--documents", "documents they share", 1, 1000, default=3)
    _seconds_option(demo, "--seconds", "how long the workers race", 8.0)
    demo.add_argument(
        "--seed", type=int, help="seed for the workers' random choices (default: random)"
    )


def _scenarios(text: str) -> frozenset[int]:
    from docmultilock._bench import SCENARIOS

    try:
        chosen = frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 1,2,8, not {text!r}") from None
    unknown = sorted(chosen - set(SCENARIOS))
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"scenarios are {min(SCENARIOS)} to {max(SCENARIOS)}, not {text!r}"
        )
    return chosen


#: Scenario 9's options, one per field of ``_bench.KeepAlive``: (field, type, metavar, help).
_KEEPALIVE = (
    ("locks", _count(1, 1_000_000), "N", "locks held with keepalive=True"),
    ("lifetime", seconds, "S", "the locks' lifetime"),
    ("seconds", seconds, "S", "how long they are kept alive, setup excluded"),
)


def _run_bench(args: argparse.Namespace) -> int:
    # Imported here, not at the top: the bench is a quarter of the package and only this
    # command needs it.
    from docmultilock._bench import (
        SCENARIOS,
        BenchSettings,
        KeepAlive,
        render_json,
        render_table,
        run_bench,
    )

    scenarios = frozenset(SCENARIOS) if args.scenarios is None else args.scenarios
    command = ["docmultilock bench", f"--duration {args.duration:g}"]
    if scenarios != frozenset(SCENARIOS):
        command.append("--scenarios " + ",".join(map(str, sorted(scenarios))))
    chosen = {
        option: value
        for option, *_ in _KEEPALIVE
        if (value := getattr(args, f"keepalive_{option}")) is not None
    }
    keepalive = replace(KeepAlive(), **chosen)
    if 9 in scenarios:
        for option, value in asdict(keepalive).items():
            if value != getattr(KeepAlive, option):
                command.append(f"--keepalive-{option} {value:g}")
    if args.uri:
        command.append(f"--uri <{hosts(args.uri)}>")
    settings = BenchSettings(
        uri=args.uri,
        duration=args.duration,
        scenarios=scenarios,
        command=" ".join(command),
        keepalive=keepalive,
    )
    report = run_bench(settings)
    sys.stdout.write(render_json(report) if args.json else render_table(report))
    return 0


def _bench_description() -> str:
    from docmultilock._bench import SCENARIOS, KeepAlive

    listing = "; ".join(f"{number} {title}" for number, title in SCENARIOS.items())
    return (
        "Measure docmultilock beside the floor: the same number of raw pymongo "
        "find_one_and_update calls doing a hand-written single-document lock, in the same "
        "run on the same server. Prints one table (or JSON) with docmultilock's figure, "
        "the floor's, their ratio and the target. Without --uri each measurement gets a "
        f"fresh embedded server. Scenarios: {listing}. Scenario 9 keeps "
        f"{KeepAlive.locks:,} locks of {KeepAlive.lifetime:g} s alive for "
        f"{KeepAlive.seconds:g} s unless the --keepalive options say otherwise."
    )


def _add_bench(commands: argparse._SubParsersAction[_Parser]) -> None:
    from pymongo.errors import PyMongoError

    from docmultilock._workers import WorkerError

    bench = _command(commands, "bench", _run_bench, (PyMongoError, WorkerError))
    bench.describe(_bench_description)
    _add_server_option(bench)
    bench.add_argument("--json", action="store_true", help="print JSON instead of the table")
    _seconds_option(
        bench, "--duration", "seconds per scenario, shared by docmultilock and the floor", 10.0
    )
    bench.add_argument(
        "--scenarios",
        type=_scenarios,
        default=None,
        metavar="N,N",
        help="which scenarios to run, by number (default: all)",
    )
    for option, kind, metavar, what in _KEEPALIVE:
        bench.add_argument(
            f"--keepalive-{option}",
            type=kind,
            default=None,
            metavar=metavar,
            help=f"scenario 9: {what} (default above)",
        )


def _run_server(args: argparse.Namespace) -> int:
    """Serve an embedded server until Ctrl-C (or SIGTERM); its URI goes to stdout."""
    from docmultilock._server_wear import SLOWDOWN
    from docmultilock.testing import EmbeddedServer

    with EmbeddedServer(port=args.port, storage_path=args.storage) as server:
        # The notes first: whoever reads the URI from stdout has them by then.
        print(
            f"embedded test server on {hosts(server.uri)}; try: docmultilock doctor --uri "
            f"'{server.uri}'; Ctrl-C stops it\nnote: {SLOWDOWN}",
            file=sys.stderr,
            flush=True,
        )
        print(server.uri, flush=True)
        try:
            server.wait()
        except KeyboardInterrupt:
            print("stopping", file=sys.stderr)
        return 0


def _add_server(commands: argparse._SubParsersAction[_Parser]) -> None:
    server = _command(commands, "server", _run_server)
    server.add_argument(
        "--port", type=_count(1, 65535), help="the port to listen on (default: a free one)"
    )
    server.add_argument(
        "--storage",
        default=":memory:",
        metavar="DIR",
        help="a directory to keep the data in across runs (default: in memory)",
    )


def build_parser() -> argparse.ArgumentParser:
    """Build the argument parser: one subparser per subcommand, each naming its ``handler``."""
    parser = _Parser(
        prog="docmultilock",
        description="Document-level locks on MongoDB: tools around the library.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(
        title="commands", metavar="COMMAND", required=True, parser_class=_Parser
    )
    _add_demo(commands)
    _add_bench(commands)
    _add_server(commands)
    # The operators' commands (inspect, break, ensure-indexes, doctor) live in their own
    # module; imported here, as it imports this one for ``hosts``.
    from docmultilock._cli_ops import add_commands

    add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    ::

        sys.exit(main(["demo", "--seconds", "3"]))
    """
    if (sys.argv[1:] if argv is None else argv)[:1] == ["--version"]:
        # Answered before the parser is built: building it imports every command's module.
        print(f"docmultilock {__version__}")
        return 0
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 2
    handler: Handler = args.handler
    try:
        return handler(args)
    except getattr(args, "failures", ()) as exc:  # the operators' commands map their own
        print(f"docmultilock {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
