"""``docmultilock inspect``: who holds one document's or name's lock, or every locked document.

Read-only. ``--watch S`` repeats either form every ``S`` seconds until Ctrl-C; on a terminal
each refresh replaces the last. Registered with the other operators' commands by ``_cli_ops``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from docmultilock._cli_session import (
    EXIT,
    CliError,
    connect,
    matching,
    place_of,
    render_snapshot,
    target,
    unanswered,
)
from docmultilock._command import SIMPLE_COLLATION
from docmultilock._core import LockCore
from docmultilock._inspection import ListPlan
from docmultilock._rules import READ_WRITE, build_rules
from docmultilock._snapshot import LockSnapshot
from docmultilock.errors import IncompatibleLockField

__all__ = ["COUNT_MOST", "LIST_BATCH", "run_inspect"]

#: ``inspect`` counts the documents a ``--filter`` matches up to this many.
COUNT_MOST = 1000
#: ``inspect --all`` reads the locked documents this many at a time.
LIST_BATCH = 100


def _refresh(args: argparse.Namespace) -> None:
    """Clear the terminal before a refresh of ``--watch`` (not in a pipe, nor for JSON)."""
    if args.watch and not args.json and sys.stdout.isatty():
        sys.stdout.write("\x1b[H\x1b[2J")


def _locked(collection: Collection[dict[str, Any]], plan: ListPlan) -> list[LockSnapshot]:
    """Every document of ``collection`` whose lock field holds an entry, by ``_id``.

    One read-only aggregation, read a batch at a time; a field docmultilock does not own
    is named on stderr and skipped.
    """
    found = []
    try:
        for reply in collection.aggregate(
            plan.pipeline, collation=SIMPLE_COLLATION, batchSize=LIST_BATCH
        ):
            try:
                found.append(plan.read(reply))
            except IncompatibleLockField as exc:
                print(f"skipped: {exc}", file=sys.stderr)
    except PyMongoError as exc:
        status = "unreachable" if unanswered(exc) else "failed"
        raise CliError(f"cannot list the locked documents: {exc}", status) from exc
    return found


def _exists(collection: Collection[dict[str, Any]]) -> bool:
    try:
        names = collection.database.list_collection_names(filter={"name": collection.name})
    except PyMongoError as exc:
        status = "unreachable" if unanswered(exc) else "failed"
        raise CliError(f"cannot list the collections: {exc}", status) from exc
    return collection.name in names


def _inspect_all(args: argparse.Namespace) -> int:
    """``inspect --all``: every locked document of ``--collection``, once or every ``--watch``.

    With ``--json``, one line per document; under ``--watch``, one line per refresh (a JSON
    array of the documents).
    """
    if not args.collection:
        raise CliError("--all needs --collection", "usage")
    with connect(args) as client:
        collection = client[args.db][args.collection]
        if not _exists(collection):
            raise CliError(
                f"there is no collection {collection.full_name} (check --db and --collection)",
                "not_found",
            )
        core = LockCore(args.field, build_rules(READ_WRITE, {}, 1), namespace=collection.full_name)
        plan = ListPlan.make(core)
        while True:
            snapshots = _locked(collection, plan)
            _refresh(args)
            if args.json and args.watch:
                sys.stdout.write(json.dumps([found.as_json() for found in snapshots]) + "\n")
            elif args.json:
                sys.stdout.writelines(json.dumps(found.as_json()) + "\n" for found in snapshots)
            else:
                heading = f"{collection.full_name} document"
                sys.stdout.writelines(render_snapshot(found, heading) for found in snapshots)
                count = len(snapshots)
                print(
                    f"{count} locked document{'' if count == 1 else 's'} in {collection.full_name}"
                )
            sys.stdout.flush()
            if not args.watch:
                return EXIT["ok"]
            time.sleep(args.watch)


def run_inspect(args: argparse.Namespace) -> int:
    """``inspect``: one lock (``--filter`` or ``--name``), or ``--all``."""
    if args.all:
        return _inspect_all(args)
    with connect(args) as client:
        locks, key = target(client, args)
        if args.name is None:
            count = matching(locks, key, COUNT_MOST)
            if count > 1:
                # acquire() takes the first match too; say so rather than show it alone.
                many = f"{count} or more" if count >= COUNT_MOST else str(count)
                print(
                    f"--filter matches {many} documents; this is the first, the one a lock "
                    "on this filter takes (name one by _id to choose)",
                    file=sys.stderr,
                )
        while True:
            snapshot = locks.inspect(key)
            _refresh(args)
            if args.json:
                sys.stdout.write(json.dumps(snapshot.as_json()) + "\n")
            else:
                sys.stdout.write(render_snapshot(snapshot, place_of(locks, args)))
            sys.stdout.flush()
            if not args.watch:
                return EXIT["ok"]
            time.sleep(args.watch)
