"""Checks of per-call arguments (filters, tags, locks), made before anything is sent."""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import Mapping
from typing import Any

from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions
from bson.objectid import ObjectId
from bson.regex import Regex

from docmultilock._bson_identity import same_bson_value
from docmultilock._lock import (
    LOCK_ID_PATTERN,
    MAX_DEPTH,
    Lock,
    document_id_problem,
    nests_deeper_than,
)
from docmultilock._rules import TagRules
from docmultilock.errors import InvalidArgument

#: The longest lock name, in characters.
MAX_NAME_LENGTH = 512

__all__ = [
    "check_collection_name",
    "check_conversion",
    "check_filter",
    "check_flavour",
    "check_lock",
    "check_name",
    "check_tag",
    "document_target",
    "tag_or_only",
]


#: Values that hold no documents or arrays: a filter of these alone nests one level deep.
_FLAT = frozenset({str, int, float, bool, type(None), ObjectId})


def _flat(filter: dict[Any, Any]) -> bool:  # noqa: A002
    for key, value in filter.items():  # a loop, not all(<generator>): per call, on the hot path
        if type(key) is not str or type(value) not in _FLAT:
            return False
    return True


def check_filter(filter: object) -> dict[str, Any]:  # noqa: A002
    """Accept a non-empty mapping with string keys; return a plain dict copy."""
    # The common case, checked in one pass: a dict of plain values under string keys.
    if type(filter) is dict and filter and _flat(filter):
        return dict(filter)
    if not isinstance(filter, Mapping):
        hint = ""
        if isinstance(filter, (str, int, float, ObjectId, uuid.UUID)) and not isinstance(
            filter, bool
        ):
            hint = f": to lock the document whose _id is {filter!r}, pass {{'_id': {filter!r}}}"
        raise InvalidArgument(f"filter must be a mapping, not {type(filter).__name__}{hint}")
    if not filter:
        # An empty filter would lock whichever document comes first.
        raise InvalidArgument("filter must not be empty")
    if not all(isinstance(key, str) for key in filter):
        raise InvalidArgument("filter keys must be strings")
    if nests_deeper_than(filter, MAX_DEPTH):
        raise InvalidArgument(
            f"filter nests documents and arrays too deep: MongoDB allows {MAX_DEPTH} levels"
        )
    return dict(filter)


def check_name(name: object) -> str:
    """Accept a lock name: a string of 1 to 512 characters that UTF-8 can encode."""
    if not isinstance(name, str):
        raise InvalidArgument(f"a lock name must be a string, not {type(name).__name__}")
    if not 1 <= len(name) <= MAX_NAME_LENGTH:
        raise InvalidArgument(
            f"a lock name must have 1 to {MAX_NAME_LENGTH} characters, not {len(name)}"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"a lock name must be valid text: {exc}") from exc
    return name


def check_collection_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidArgument(f"collection must be a string, not {type(name).__name__}")
    if not name or "$" in name or "\x00" in name or name.startswith("system."):
        raise InvalidArgument(
            f"collection must be a non-empty name without '$' or NUL, not in 'system.'; "
            f"got {name!r}"
        )
    return name


def check_flavour(value: object, expected: type, what: str, manager: str) -> None:
    """Refuse a ``value`` of the other flavour (or no pymongo object at all) for ``manager``.

    A sync manager takes pymongo's ``Collection``/``Database``, an async one
    ``AsyncCollection``/``AsyncDatabase``; a mix-up is named with the right class to use.
    """
    if isinstance(value, expected):
        return
    given = type(value).__name__
    wanted = expected.__name__
    message = f"{manager} needs a pymongo {wanted} as {what}, not {given}"
    if given in (f"Async{wanted}", wanted.removeprefix("Async")):
        twin = manager.removeprefix("Async") if manager.startswith("Async") else f"Async{manager}"
        message += f"; use {twin} with {given}"
    raise InvalidArgument(message)


def check_tag(tag: object, rules: TagRules) -> str:
    """Accept a declared tag only: a typo must not silently become a concurrent lock."""
    if not isinstance(tag, str):
        raise InvalidArgument(f"tag must be a string, not {type(tag).__name__}")
    if tag not in rules.lifetime_ms:
        declared = ", ".join(repr(t) for t in sorted(rules.tags))
        raise InvalidArgument(f"undeclared tag {tag!r}; declared tags: {declared}")
    return tag


def tag_or_only(tag: object, rules: TagRules) -> str:
    """``check_tag``, with ``None`` meaning the one tag of a table that declares only one."""
    if tag is None:
        declared = rules.lifetime_ms  # every declared tag (not ``rules.tags``: a set less)
        if len(declared) != 1:
            listed = ", ".join(repr(t) for t in sorted(declared))
            raise InvalidArgument(f"give tag=: this lock manager declares {listed}")
        (only,) = declared
        return only
    return check_tag(tag, rules)


def check_lock(lock: object, rules: TagRules, *, granted: bool = False) -> Lock:
    """Accept a :class:`Lock` of a declared tag (and, with ``granted``, not pending).

    A Lock may have been built by hand rather than returned by a lock manager or loaded
    by :class:`~docmultilock.LockSchema`, so its id and ``document_id`` are checked as the
    schema checks them.
    """
    if not isinstance(lock, Lock):
        hint = ""
        if inspect.isawaitable(lock):
            hint = " (an async lock manager's acquire() returns one: was 'await' forgotten?)"
        raise InvalidArgument(f"lock must be a docmultilock.Lock, not {type(lock).__name__}{hint}")
    if not (isinstance(lock.id, str) and LOCK_ID_PATTERN.match(lock.id)):
        raise InvalidArgument(f"lock id must be 32 lowercase hex digits, not {lock.id!r}")
    problem = document_id_problem(lock.document_id)
    if problem is not None:
        raise InvalidArgument(f"lock {lock.id}: document_id {lock.document_id!r} {problem}")
    if not isinstance(lock.tag, str) or lock.tag not in rules.lifetime_ms:
        raise InvalidArgument(
            f"lock {lock.id} has tag {lock.tag!r}, which this lock manager does not declare"
        )
    if granted and lock.pending:
        raise InvalidArgument(
            f"lock {lock.id} is still pending; continue it with acquire(filter, lock=lock) first"
        )
    return lock


def check_conversion(lock: object, tag: object, rules: TagRules) -> tuple[Lock, str]:
    """Accept a conversion of ``lock`` to the declared ``tag``.

    A granted lock may take any declared tag; a pending one is an upgrade in progress
    (``AssertiveLock.lock`` of a conversion), continued only to its own tag.
    """
    held = check_lock(lock, rules)
    wanted = check_tag(tag, rules)
    if held.pending and held.tag != wanted:
        raise InvalidArgument(
            f"lock {held.id} is a pending upgrade to {held.tag!r}: it is continued with "
            f"tag={held.tag!r}, not {wanted!r}"
        )
    return held, wanted


def _is_plain_value(value: object) -> bool:
    """True for an equality value, false for an operator or a regular expression.

    A filter matches ``{"$in": [...]}`` or a pattern against the ``_id``; it compares only
    an equality value with it.
    """
    if type(value) in _FLAT:  # the common _id, before the slower Mapping check
        return True
    if isinstance(value, (Regex, re.Pattern)):
        return False
    return not (isinstance(value, Mapping) and any(str(k).startswith("$") for k in value))


def document_target(
    filter: dict[str, Any],  # noqa: A002
    document_id: Any,
    codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS,
) -> dict[str, Any]:
    """The filter for acting on the lock's own document, refusing one that names another.

    An ``_id`` equality in the filter is compared with the lock's document here (as the
    collection's ``codec_options`` encode both), so a lock from another document is
    refused before anything is written. Any other filter is combined with the lock's
    ``_id``, so the command matches only that document, and only while it still matches
    the caller's filter.
    """
    if "_id" not in filter:
        return {**filter, "_id": document_id}
    named = filter["_id"]
    if _is_plain_value(named):
        if not same_bson_value(named, document_id, codec_options):
            raise InvalidArgument(
                f"the lock belongs to document {document_id!r}, but the filter names {named!r}"
            )
        return filter
    return {"$and": [filter, {"_id": document_id}]}
