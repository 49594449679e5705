"""What every operator subcommand shares: exit statuses, connecting, the target, rendering.

The subcommands themselves are in ``_cli_ops``; this module holds their common ground: the
exit statuses (the table in ``_cli_ops``), :class:`CliError`, the connection checked within
``--timeout``, the parsing of ``--filter``, the manager and key a command targets, the
tables ``inspect`` and ``break`` print, and :func:`run`, the one place a failure becomes an
exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from bson import json_util
from bson.errors import BSONError
from pymongo import MongoClient
from pymongo.errors import ConfigurationError, ConnectionFailure, InvalidName, PyMongoError

from docmultilock._cli_args import hosts
from docmultilock._command import SIMPLE_COLLATION
from docmultilock._snapshot import HolderSnapshot, LockSnapshot
from docmultilock._sync.managers import LockManager, MultiLock
from docmultilock._sync.named import NamedLocks
from docmultilock.errors import (
    DbTimeout,
    InvalidArgument,
    LockError,
    ResourceNotFound,
)
from docmultilock.testing import URI_VARIABLE

__all__ = [
    "EXIT",
    "NAMED_COLLECTION",
    "CliError",
    "connect",
    "matching",
    "parse_filter",
    "place_of",
    "render_holders",
    "render_snapshot",
    "run",
    "target",
    "unanswered",
]

#: Exit statuses, by what went wrong (the table in the module docstring).
EXIT = {
    "ok": 0,
    "failed": 1,
    "usage": 2,
    "bad_uri": 3,
    "unreachable": 4,
    "bad_json": 5,
    "not_found": 6,
    "not_confirmed": 7,
}

#: The named-lock collection of :class:`~docmultilock.NamedLocks` by default.
NAMED_COLLECTION = "docmultilock.locks"


class CliError(Exception):
    """A failure reported as one line on stderr with the exit status ``status``."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = EXIT[status]


# -- connecting ----------------------------------------------------------------------------


@contextlib.contextmanager
def connect(args: argparse.Namespace) -> Iterator[MongoClient[dict[str, Any]]]:
    """A client on ``--uri`` that answered a ping within ``--timeout``; closed after.

    Sets ``args.db`` when ``--db`` is not given: to the database the URI names, else to the
    command's own default (``doctor``'s), else it is a usage error.
    """
    uri = args.uri or os.environ.get(URI_VARIABLE)
    if not uri:
        raise CliError(f"give --uri (or set ${URI_VARIABLE})", "usage")
    ms = int(args.timeout * 1000)
    try:
        client: MongoClient[dict[str, Any]] = MongoClient(
            uri,
            serverSelectionTimeoutMS=ms,
            connectTimeoutMS=ms,
            timeoutMS=ms,
            appname="docmultilock-cli",
        )
    # InvalidURI among them; an OSError for a TLS file (tlsCAFile=...) that cannot be read.
    except (ConfigurationError, ValueError, TypeError, OSError) as exc:
        raise CliError(f"bad --uri: {exc}", "bad_uri") from exc
    try:
        args.db = _database(args, client)
        try:
            client.admin.command("ping")
        except PyMongoError as exc:
            why = str(exc).split(", Timeout:")[0]  # not the whole topology description
            raise CliError(
                f"cannot reach {hosts(uri)} within {args.timeout:g} s: {why}", "unreachable"
            ) from exc
        yield client
    finally:
        client.close()


def _database(args: argparse.Namespace, client: MongoClient[dict[str, Any]]) -> str:
    """``--db``, else the database the URI names, else the command's default."""
    if args.db:
        return str(args.db)
    try:
        return client.get_default_database().name
    except ConfigurationError:  # the URI names no database
        pass
    if args.fallback_db:
        return str(args.fallback_db)
    raise CliError("give --db, or name the database in --uri (mongodb://host/DB)", "usage")


#: Added to a ``--filter`` that does not parse: a shell's quoting is the usual cause.
JSON_HINT = (
    "keys and strings need double quotes, the whole filter in single quotes for the shell: "
    "--filter '{\"_id\": 1}'"
)


def parse_filter(text: str) -> dict[str, Any]:
    try:
        parsed = json_util.loads(text)
    # ArithmeticError: a $numberDecimal or $date out of range; RecursionError: deep nesting.
    except (ValueError, TypeError, BSONError, ArithmeticError, RecursionError) as exc:
        raise CliError(f"--filter is not valid JSON: {exc} ({JSON_HINT})", "bad_json") from exc
    if not isinstance(parsed, dict):
        raise CliError(f"--filter must be a JSON object, not {type(parsed).__name__}", "bad_json")
    return parsed


def target(
    client: MongoClient[dict[str, Any]], args: argparse.Namespace
) -> tuple[LockManager, Any]:
    """``(manager, key)`` for ``--name`` or ``--filter``; any tag table reads any entry."""
    database = client[args.db]
    if args.name is not None:
        locks: LockManager = NamedLocks(
            database, args.collection or NAMED_COLLECTION, timeout=args.timeout
        )
        return locks, args.name
    if not args.collection:
        raise CliError("--filter needs --collection", "usage")
    key = parse_filter(args.filter)
    return MultiLock(database[args.collection], field=args.field, timeout=args.timeout), key


def place_of(locks: LockManager, args: argparse.Namespace) -> str:
    """How output names the target's place: the collection, and document or name."""
    noun = "name" if args.name is not None else "document"
    return f"{locks.collection.full_name} {noun}"


def matching(locks: LockManager, key: Any, most: int) -> int:
    """How many documents ``key`` matches, counted up to ``most``, as a lock command selects.

    Byte for byte (``SIMPLE_COLLATION``), and by ``find``, which takes every filter the
    lock commands take.
    """
    try:
        found = locks.collection.find(key, {"_id": 1}, collation=SIMPLE_COLLATION).limit(most)
        return len(list(found))
    except PyMongoError as exc:
        status = "unreachable" if unanswered(exc) else "failed"
        raise CliError(f"cannot count the documents --filter matches: {exc}", status) from exc


# -- rendering -----------------------------------------------------------------------------


def _state(holder: HolderSnapshot) -> str:
    if holder.malformed:
        return "MALFORMED"
    if holder.expired:
        return "EXPIRED"
    return "pending" if holder.pending else "held"


def render_holders(holders: Sequence[HolderSnapshot]) -> list[str]:
    """A fixed-width table of ``holders``; expired entries are marked."""
    if not holders:
        return ["(no holders)"]
    rows = [("ID", "TAG", "STATE", "FENCE", "ACQUIRED (UTC)", "EXPIRES IN")]
    rows += [
        (
            holder.id,
            holder.tag,
            _state(holder),
            str(holder.fence),
            holder.acquired_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
            f"{holder.seconds_left:.1f} s",
        )
        for holder in holders
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def render_snapshot(snapshot: LockSnapshot, where: str) -> str:
    """The ``inspect`` table: a heading line, then one row per entry."""
    state = "" if snapshot.exists else " (no lock document: nobody holds it)"
    heading = (
        f"{where} {snapshot.document_id!r}{state}: fence {snapshot.fence}, "
        f"server time {snapshot.server_time.isoformat()}"
    )
    return "\n".join([heading, *render_holders(snapshot.holders)]) + "\n"


def unanswered(exc: BaseException | None) -> bool:
    """True for a command that ran out of ``--timeout`` or found no server.

    Exit status 4, "did not answer within --timeout", as for a server that cannot be reached.
    """
    if isinstance(exc, (DbTimeout, ConnectionFailure)):
        return True
    return isinstance(exc, PyMongoError) and exc.timeout


def run(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run an operator command, turning every expected failure into its exit status."""
    try:
        return handler(args)
    except CliError as err:
        message, status = str(err), err.status
    except ResourceNotFound as err:
        message, status = str(err), EXIT["not_found"]
    except InvalidArgument as err:
        message, status = str(err), EXIT["usage"]
    except InvalidName as err:  # --db or --collection, refused by pymongo
        message, status = f"bad database or collection name: {err}", EXIT["usage"]
    except LockError as err:
        unreachable = unanswered(err) or unanswered(err.__cause__)
        message, status = str(err), EXIT["unreachable" if unreachable else "failed"]
    print(f"docmultilock {args.command}: {message}", file=sys.stderr)
    return status
