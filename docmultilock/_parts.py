"""One lock manager's parts: the value every flow of that manager is handed.

A manager is made of a few pure parts, built once at its construction and frozen in
:class:`Parts`: the core that builds its commands (for its field, table and home), the
ledger of what it saw granted, the listener's emitter, the codec options ids are compared
with, and the parsing of its calls (``_parsing``). The flows (``_lock_flows``,
``_read_flows``, ``_holding``, ...) are functions that take it, or only the part they
use; nothing here sends or decides.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions
from pymongo.errors import PyMongoError

from docmultilock import _indexes
from docmultilock._args import document_target
from docmultilock._calls import Continued, Conversion, Held
from docmultilock._command import Home, Verdicts
from docmultilock._core import LockCore
from docmultilock._events import Emitter, LockListener
from docmultilock._failures import translate
from docmultilock._flows import Flow, MakeTtlIndex
from docmultilock._judge import Judge
from docmultilock._ledger import Ledger
from docmultilock._parsing import Parser
from docmultilock._rules import TagRules
from docmultilock.errors import LockError
from docmultilock.options import LockOptions

__all__ = [
    "NAMED_FIELD",
    "Parts",
    "describe",
    "ensure_indexes",
    "index_once",
    "new_lock_id",
]

log = logging.getLogger("docmultilock")

#: The field of a named lock's document that holds its state.
NAMED_FIELD = "lock"


def new_lock_id() -> str:
    """128 random bits: a lock id can be neither guessed nor forged.

    From the operating system's generator, as ``secrets.token_hex(16)`` draws them, without
    its three Python-level calls (one id per acquisition).
    """
    return os.urandom(16).hex()


@dataclass(frozen=True, slots=True, eq=False)
class Parts:
    """One manager's parts, handed to its flows (plain attribute reads on the hot path).

    Equal and hashed by identity, as the manager they make: the keep-alive groups holds by
    their manager's parts (``_async/held.py``), and the codec options are no key.

    :ivar core: builds each operation's command and plan (``_core``).
    :ivar home: where the state lives (the core's): user documents, or a document per name.
    :ivar judge: what a reply means, and the errors of this manager's home and verdicts.
    :ivar rules: the tag table.
    :ivar field: the lock field.
    :ivar max_holders: the most live entries a key takes.
    :ivar ledger: what this manager saw granted (a release after a lost reply is judged by it).
    :ivar events: the listener's emitter, told of every decision.
    :ivar codec_options: the collection's, with which a filter's ``_id`` is compared to a
        lock's document (a ``uuid.UUID`` is encoded by its representation).
    :ivar parse: each public call parsed once into a call of its kind (``_parsing``).
    :ivar where: the collection for the process-wide TTL-index record: its client (held
        weakly) and full name.
    """

    core: LockCore
    home: Home
    judge: Judge
    rules: TagRules
    field: str
    max_holders: int
    ledger: Ledger
    events: Emitter
    codec_options: CodecOptions[Any]
    parse: Parser
    where: tuple[object, str]

    @classmethod
    def make(
        cls,
        options: LockOptions,
        *,
        home: Home,
        verdicts: Verdicts,
        where: tuple[object, str],
        codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS,
        listener: LockListener | None = None,
    ) -> Parts:
        """The parts of a manager with ``options``, keeping its state in ``home``.

        :param listener: told of every decision (``_events``); its errors are only logged.
        """
        core = LockCore(
            options.field,
            options.rules,
            home=home,
            verdicts=verdicts,
            max_holders=options.max_holders,
            namespace=where[1],
        )
        return cls(
            core=core,
            home=home,
            judge=core.judge,
            rules=options.rules,
            field=options.field,
            max_holders=options.max_holders,
            ledger=Ledger(),
            events=Emitter(listener),
            codec_options=codec_options,
            parse=Parser(options, core, codec_options),
            where=where,
        )

    @classmethod
    def on(
        cls,
        collection: Any,
        options: LockOptions,
        *,
        home: Home,
        verdicts: Verdicts,
        listener: LockListener | None,
    ) -> Parts:
        """The parts of a manager keeping its state in ``collection`` (either flavour's).

        The collection gives the TTL-index record its key (its client and full name) and
        the codec options ids are compared with.
        """
        return cls.make(
            options,
            home=home,
            verdicts=verdicts,
            where=(collection.database.client, collection.full_name),
            codec_options=collection.codec_options,
            listener=listener,
        )

    def target(self, call: Continued | Held | Conversion) -> dict[str, Any]:
        """The filter a command on ``call``'s lock sends: the key's, pinned to its document."""
        return document_target(call.user_filter, call.lock.document_id, self.codec_options)


def ensure_indexes(where: tuple[object, str], *, limit: float | None) -> Flow[None]:
    """Create the TTL index of the named-lock collection ``where`` now (idempotent)."""
    try:
        yield MakeTtlIndex(NAMED_FIELD, _indexes.TTL_INDEX, limit)
    except PyMongoError as exc:
        raise translate(exc, "ensure_indexes", None) from exc
    _indexes.TTL_INDEXES.created(*where)


def index_once(where: tuple[object, str], limit: float | None) -> Flow[None]:
    """Make sure of the TTL index after a grant (the collection exists by then)."""
    if not _indexes.TTL_INDEXES.due(*where):
        return
    try:
        yield from ensure_indexes(where, limit=limit)
    except LockError as err:
        # The lock is already held: failing the acquire would leak it. An acquire tries
        # again after INDEX_RETRY_SECONDS; ensure_indexes() reports the error.
        retry = _indexes.INDEX_RETRY_SECONDS
        first = _indexes.TTL_INDEXES.failed(*where, retry)
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "could not create the TTL index on %s (trying again in %.0f s; create it at "
            "deployment with NamedLocks.ensure_indexes()): %s",
            where[1],
            retry,
            err,
        )


def describe(options: LockOptions, full_name: str, cls: str) -> str:
    """A manager's ``repr``: its class, collection, field and tags."""
    return f"{cls}({full_name!r}, field={options.field!r}, tags={sorted(options.rules.tags)!r})"
