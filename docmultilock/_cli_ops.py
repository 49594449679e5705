"""The operators' subcommands: ``inspect``, ``break``, ``ensure-indexes`` and ``doctor``.

Registered by :func:`docmultilock.cli.build_parser` through :func:`add_commands`;
``inspect`` runs in ``_cli_inspect``. Each connects with the given ``--uri`` (else
``$DOCMULTILOCK_MONGODB_URI``; ``--db`` defaults to the database it names), checks that the
server answers within ``--timeout``, and reports a failure as one line on stderr with its
own exit status:

====  =================================================================================
code  meaning
====  =================================================================================
0     done (``doctor``: no check warned, but for advisory ones)
1     the command failed (a lock field docmultilock does not own, a database error;
      ``doctor``: a check that is not advisory warned)
2     usage error (missing or contradictory options, no ``--db`` and none named in
      ``--uri``, an empty filter, a bad name, a ``--filter`` that ``break`` finds
      matching more than one document, a malformed ``--lock-id``)
3     bad ``--uri``
4     the server did not answer within ``--timeout`` (at connection, or any command)
5     ``--filter`` is not a JSON (Extended JSON) object
6     no document matches ``--filter``; ``break --lock-id``: no entry has that id;
      ``inspect --all``: there is no such collection
7     ``break`` was not confirmed (declined, or no terminal to ask on and no ``--yes``):
      nothing was written
130   interrupted (Ctrl-C; how ``inspect --watch`` ends)
====  =================================================================================
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from docmultilock import _doctor
from docmultilock._args import document_target
from docmultilock._cli_args import add_subcommand, seconds
from docmultilock._cli_inspect import run_inspect
from docmultilock._cli_session import (
    EXIT,
    NAMED_COLLECTION,
    CliError,
    connect,
    matching,
    place_of,
    render_holders,
    run,
    target,
)
from docmultilock._lock import LOCK_ID_PATTERN
from docmultilock._snapshot import HolderSnapshot
from docmultilock._sync.managers import LockManager
from docmultilock._sync.named import NamedLocks
from docmultilock.testing import URI_VARIABLE

__all__ = ["EXIT", "add_commands", "run"]

# -- the commands ----------------------------------------------------------------------------


def _confirmed(count: int) -> bool:
    """Ask on the terminal; no terminal (a pipe, cron) or end of input is a refusal."""
    if not sys.stdin.isatty():
        print("no terminal to confirm on: pass --yes to break without asking", file=sys.stderr)
        return False
    try:
        answer = input(f"remove {count} entr{'y' if count == 1 else 'ies'}? [y/N] ")
    except EOFError:  # Ctrl-D
        print(file=sys.stderr)
        return False
    return answer.strip().lower() in ("y", "yes")


def _only_match(locks: LockManager, key: Any) -> None:
    """Refuse a ``--filter`` matching several documents: ``break`` acts on one it showed."""
    if matching(locks, key, 2) > 1:
        raise CliError(
            "--filter matches more than one document; name one (by _id) to break it", "usage"
        )


def _ids(holders: Sequence[HolderSnapshot]) -> set[str]:
    return {holder.id for holder in holders}


def _break(args: argparse.Namespace) -> int:
    if args.lock_id is not None and not LOCK_ID_PATTERN.match(args.lock_id):
        raise CliError(f"--lock-id must be 32 lowercase hex digits, not {args.lock_id!r}", "usage")
    with connect(args) as client:
        locks, key = target(client, args)
        snapshot, planned = locks.preview_break(
            key, lock_id=args.lock_id, all_expired=args.all_expired, everyone=args.everyone
        )
        where = f"{place_of(locks, args)} {snapshot.document_id!r}"
        if args.name is None:
            _only_match(locks, key)
            # Break exactly the document shown, whatever else matches by the time it runs.
            key = document_target(key, snapshot.document_id, locks.collection.codec_options)
        if args.lock_id is not None and args.lock_id not in _ids(snapshot.holders):
            raise CliError(f"no entry {args.lock_id} on {where}: nothing was written", "not_found")
        if not planned:
            print("nothing to remove", file=sys.stderr)
            if args.json:
                print(json.dumps({"removed": []}))
            return EXIT["ok"]
        print(f"will remove from {where}:", file=sys.stderr)
        print("\n".join(render_holders(planned)), file=sys.stderr)
        if not args.yes and not _confirmed(len(planned)):
            print("not confirmed: nothing was written", file=sys.stderr)
            return EXIT["not_confirmed"]
        removed = locks.break_lock(
            key, lock_id=args.lock_id, all_expired=args.all_expired, everyone=args.everyone
        )
        _differences(planned, removed)
        if args.json:
            print(json.dumps({"removed": [holder.as_json() for holder in removed]}))
        else:
            print(f"removed {len(removed)}; the fence is kept")
            print("\n".join(render_holders(removed)))
    return EXIT["ok"]


def _differences(planned: Sequence[HolderSnapshot], removed: Sequence[HolderSnapshot]) -> None:
    """Say on stderr how what was removed differs from the preview (the lock moved on)."""
    extra = [holder for holder in removed if holder.id not in _ids(planned)]
    if extra:
        print(
            f"note: {len(extra)} entr{'y' if len(extra) == 1 else 'ies'} appeared after the "
            f"preview and {'was' if len(extra) == 1 else 'were'} removed too: "
            + ", ".join(holder.id for holder in extra),
            file=sys.stderr,
        )
    gone = sorted(_ids(planned) - _ids(removed))
    if gone:
        print(
            f"note: {len(gone)} previewed entr{'y' if len(gone) == 1 else 'ies'} had already "
            "gone (released or pruned): " + ", ".join(gone),
            file=sys.stderr,
        )


def _ensure_indexes(args: argparse.Namespace) -> int:
    with connect(args) as client:
        name = args.collection or NAMED_COLLECTION
        NamedLocks(client[args.db], name, timeout=args.timeout).ensure_indexes()
        print(f"ok: TTL index on {args.db}.{name} lock.expires")
    return EXIT["ok"]


def _doctor_command(args: argparse.Namespace) -> int:
    with connect(args) as client:
        checks = _doctor.run_checks(
            client, args.db, args.collection or _doctor.SCRATCH, args.timeout
        )
    if args.json:
        print(json.dumps([check.as_json() for check in checks]))
    else:
        sys.stdout.write(_doctor.render(checks))
    return EXIT["ok"] if _doctor.passed(checks) else EXIT["failed"]


# -- registering -----------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser, *, db: str | None = None) -> None:
    parser.add_argument("--uri", help=f"MongoDB connection string (default: ${URI_VARIABLE})")
    parser.add_argument(
        "--db",
        help="database (default: the one --uri names"
        + (f", else {db})" if db else "; one of the two is needed)"),
    )
    parser.set_defaults(fallback_db=db)
    parser.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="S",
        help="seconds to wait for the server and for each command (default 10)",
    )


def _target_options(parser: argparse.ArgumentParser, *, every: bool = False) -> None:
    parser.add_argument(
        "--collection",
        help=f"the collection (for --name, the lock collection; default {NAMED_COLLECTION})",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--filter", help="the locked document, as (Extended) JSON: '{\"_id\": 1}'")
    which.add_argument("--name", help="a named lock (NamedLocks)")
    if every:
        which.add_argument(
            "--all",
            action="store_true",
            help="every document of --collection whose lock field holds an entry, by _id "
            "(with --watch and --json: one JSON array per refresh)",
        )
    parser.add_argument(
        "--field", default="lock", help="the lock field, with --filter (default lock)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


#: Each subcommand's help line and description.
TEXTS = {
    "inspect": (
        "show who holds a lock, by the server's clock (read-only)",
        "Show every entry of a lock field: id, tag, held/pending/EXPIRED, fence, when it was "
        "acquired and how long it has left, by the server's clock. Writes nothing.",
    ),
    "break": (
        "remove entries from a lock, keeping its fence",
        "Remove entries from a lock field in one atomic command that keeps the fence (never "
        "$unset the field). Shows what it will remove and asks unless --yes; declining, or no "
        "terminal to ask on, exits 7 and writes nothing.",
    ),
    "ensure-indexes": (
        "create the TTL index of a named-lock collection",
        "Create the TTL index on lock.expires that removes lock documents nobody holds, for "
        "deployments where the application's user may not create indexes.",
    ),
    "doctor": (
        "check what a server gives docmultilock",
        "Check the server's version, topology, majority writes, change streams, clock offset "
        f"and round-trip time; one ok/warn line each. Writes and deletes one document in "
        f"DB.{_doctor.SCRATCH}. Exits 1 when a check warns, except an advisory one (change "
        "streams: without them waiters poll).",
    ),
}


def _register(
    commands: argparse._SubParsersAction[Any],
    name: str,
    handler: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = add_subcommand(
        commands, name, TEXTS[name], handler=lambda args: run(handler, args)
    )
    return parser


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Add ``inspect``, ``break``, ``ensure-indexes`` and ``doctor`` to ``commands``."""
    inspect = _register(commands, "inspect", run_inspect)
    _common(inspect)
    _target_options(inspect, every=True)
    inspect.add_argument(
        "--watch", type=seconds, metavar="S", help="refresh every S seconds (Ctrl-C ends)"
    )

    breaking = _register(commands, "break", _break)
    _common(breaking)
    _target_options(breaking)
    mode = breaking.add_mutually_exclusive_group(required=True)
    mode.add_argument("--lock-id", help="remove the entry with this id (and expired ones)")
    mode.add_argument("--all-expired", action="store_true", help="remove only expired entries")
    mode.add_argument("--everyone", action="store_true", help="remove every entry")
    breaking.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    indexes = _register(commands, "ensure-indexes", _ensure_indexes)
    _common(indexes)
    indexes.add_argument(
        "--collection", help=f"the named-lock collection (default {NAMED_COLLECTION})"
    )

    doctor = _register(commands, "doctor", _doctor_command)
    _common(doctor, db="docmultilock")
    doctor.add_argument(
        "--collection", help=f"scratch collection for the write checks (default {_doctor.SCRATCH})"
    )
    doctor.add_argument("--json", action="store_true", help="print JSON instead of lines")
