"""Validation of every option, once, into immutable values.

Constructor options go through marshmallow schemas so that one
:class:`~docmultilock.InvalidConfiguration` names every problem at once. Per-call overrides
(``lock_timeout=``, ``timeout=``, ``w=``) go through the same parsing functions, raising
:class:`~docmultilock.InvalidArgument` before anything is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import marshmallow
from marshmallow import fields, validate

from docmultilock._command import DEFAULT_MAX_HOLDERS
from docmultilock._events import KINDS
from docmultilock._keywords import (
    AcquireOptions,
    BreakOptions,
    Duration,
    ErrorFactory,
    HoldOptions,
    ManagerOptions,
    MultiLockOptions,
    NamedLocksOptions,
    NewLockOptions,
    PreviewOptions,
    WriteLockOptions,
)
from docmultilock._rules import TagRules, build_rules, check_relationships
from docmultilock.errors import InvalidArgument, InvalidConfiguration

__all__ = [
    "AcquireOptions",
    "BreakOptions",
    "Duration",
    "ErrorFactory",
    "HoldOptions",
    "LockOptions",
    "ManagerOptions",
    "MultiLockOptions",
    "NamedLocksOptions",
    "NewLockOptions",
    "PreviewOptions",
    "WriteLockOptions",
    "load_options",
]


_MAX_TAG_LENGTH = 256

#: The longest operation ``timeout``: MongoDB refuses a ``maxTimeMS`` beyond 2**31 - 1 ms,
#: so a longer limit would fail every command (about 24.8 days; ``None`` means no limit).
MAX_TIMEOUT_SECONDS = (2**31 - 1) / 1000

#: The longest lock lifetime, 365 days. Expiries must stay dates that BSON and Python both
#: represent, and a lock nobody renews for a year has been forgotten, not held.
MAX_LIFETIME_SECONDS = 365 * 86400.0

#: A numeric ``w`` above this can never be satisfied: a replica set has at most 50 members.
#: It would apply every write and then report a failure, leaving a lock nobody holds.
MAX_W = 50

#: The largest ``max_holders``: about 135,000 entries fill MongoDB's 16 MiB document.
MAX_HOLDERS_LIMIT = 100_000


def is_encodable(text: str) -> bool:
    """False for text BSON cannot carry as UTF-8 (lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_duration(value: object, name: str, maximum: float = MAX_TIMEOUT_SECONDS) -> float:
    """Return a positive, finite number of seconds up to ``maximum``, refusing bools."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond any float: as good as infinite
            seconds = math.inf if value > 0 else -math.inf
    else:
        raise InvalidArgument(
            f"{name} must be seconds (a number) or a timedelta, not {type(value).__name__}"
        )
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"{name} must be positive and finite, not {value!r}")
    if seconds > maximum:
        raise InvalidArgument(f"{name} must be at most {maximum:g} seconds, not {value!r}")
    return seconds


def parse_lifetime_ms(value: object, name: str) -> int:
    """Return a lock lifetime in whole milliseconds (the server's date resolution), >= 1."""
    ms = round(parse_duration(value, name, MAX_LIFETIME_SECONDS) * 1000)
    if ms < 1:
        raise InvalidArgument(f"{name} must be at least one millisecond, not {value!r}")
    return ms


def parse_write_concern(value: object, name: str = "w") -> int | str:
    """Accept an acknowledged write concern: ``"majority"``, a tag set name, or 1 to 50."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidArgument(f"{name} must be an int or a string, not {type(value).__name__}")
    if isinstance(value, int) and value < 1:
        # w=0 is unacknowledged: the answer that decides the lock would never come back.
        raise InvalidArgument(f"{name} must be at least 1 (acknowledged writes), not {value}")
    if isinstance(value, int) and value > MAX_W:
        raise InvalidArgument(f"{name} must be at most {MAX_W} (replica set members), not {value}")
    if isinstance(value, str) and not (value and is_encodable(value)):
        raise InvalidArgument(f"{name} must be a non-empty UTF-8 string, not {value!r}")
    return value


def parse_field_name(value: object) -> str:
    """Accept a top-level field name the lock may own: not ``_id``, no ``.``, no leading ``$``."""
    if not isinstance(value, str):
        raise InvalidArgument(f"field must be a string, not {type(value).__name__}")
    if (
        not value
        or value.startswith("$")
        or "." in value
        or "\x00" in value
        or value == "_id"
        or not is_encodable(value)
    ):
        raise InvalidArgument(
            f"field must be a non-empty top-level name without '.', a leading '$', a NUL "
            f"character or a lone surrogate, and not '_id'; got {value!r}"
        )
    return value


class _Parsed(fields.Field[Any]):
    """A marshmallow field that delegates to one of the parse functions above."""

    def __init__(self, parse: Callable[[object], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._parse = parse

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        try:
            return self._parse(value)
        except InvalidArgument as exc:
            raise marshmallow.ValidationError(str(exc)) from exc


def _tag_field() -> fields.String:
    return fields.String(
        validate=[
            validate.Length(min=1, max=_MAX_TAG_LENGTH),
            _utf8,
        ]
    )


def _utf8(text: str) -> None:
    if not is_encodable(text):
        raise marshmallow.ValidationError("must be UTF-8 text (no lone surrogates)")


class _RelationshipSchema(marshmallow.Schema):
    class Meta:
        unknown = marshmallow.RAISE

    cooperative = fields.List(_tag_field(), load_default=list)
    assertive = fields.List(_tag_field(), load_default=list)


class _OptionsSchema(marshmallow.Schema):
    class Meta:
        unknown = marshmallow.RAISE

    lock_timeouts = fields.Dict(
        keys=_tag_field(),
        values=_Parsed(lambda v: parse_lifetime_ms(v, "lock timeout")),
        load_default=dict,
    )
    lock_relationships = fields.Dict(
        keys=_tag_field(), values=fields.Nested(_RelationshipSchema), required=True
    )
    # A positive whole number: ``strict`` refuses 2.0 and "3", and marshmallow's Integer
    # refuses a bool, which Python would otherwise take for 1 or 0.
    lock_limits = fields.Dict(
        keys=_tag_field(),
        values=fields.Integer(strict=True, validate=validate.Range(min=1, max=MAX_HOLDERS_LIMIT)),
        load_default=dict,
    )
    lock_timeout = _Parsed(lambda v: parse_lifetime_ms(v, "lock_timeout"), required=True)
    timeout = _Parsed(lambda v: parse_duration(v, "timeout"), allow_none=True, required=True)
    w = _Parsed(parse_write_concern, required=True)
    field = _Parsed(parse_field_name, required=True)
    error_factory = fields.Raw(allow_none=True, load_default=None)
    max_holders = fields.Integer(
        strict=True,
        load_default=DEFAULT_MAX_HOLDERS,
        validate=validate.Range(min=1, max=MAX_HOLDERS_LIMIT),
    )

    listener = fields.Raw(allow_none=True, load_default=None)

    @marshmallow.validates("listener")
    def _listens(self, value: Any, **kwargs: Any) -> None:
        # A listener may define only the hooks it wants; one with none would hear nothing.
        if value is not None and not any(callable(getattr(value, f"on_{k}", None)) for k in KINDS):
            raise marshmallow.ValidationError(
                f"must be a LockListener (or have its on_* methods), not {type(value).__name__}"
            )

    @marshmallow.validates("error_factory")
    def _callable(self, value: Any, **kwargs: Any) -> None:
        if value is not None and not callable(value):
            raise marshmallow.ValidationError("must be callable or None")

    @marshmallow.validates_schema(pass_original=True, skip_on_field_errors=False)
    def _table(self, data: dict[str, Any], original: dict[str, Any], **kwargs: Any) -> None:
        # Runs even when other fields failed, so one error names every problem. Declared
        # tags come from the raw lock_timeouts keys: a bad duration must not also make its
        # tag look undeclared.
        relationships = data.get("lock_relationships")
        if relationships is None:  # its own errors are already reported
            return
        raw_timeouts = original.get("lock_timeouts")
        timed = set(raw_timeouts) if isinstance(raw_timeouts, Mapping) else set()
        tags = set(relationships) | {tag for tag in timed if isinstance(tag, str)}
        problems = check_relationships(tags, relationships)
        if not tags:
            problems.append("at least one tag must be declared")
        errors: dict[str, list[str]] = {}
        if problems:
            errors["lock_relationships"] = problems
        # A limit only for a declared tag: a misspelt one would otherwise limit nothing.
        raw_limits = original.get("lock_limits")
        limited = raw_limits if isinstance(raw_limits, Mapping) else {}
        undeclared = [
            f"limits undeclared tag {tag!r}"
            for tag in sorted(t for t in limited if isinstance(t, str) and t not in tags)
        ]
        if undeclared:
            errors["lock_limits"] = undeclared
        if errors:
            raise marshmallow.ValidationError(errors)


@dataclass(frozen=True, slots=True)
class LockOptions:
    """Validated options of one lock manager."""

    rules: TagRules
    timeout: float | None
    w: int | str
    field: str
    error_factory: ErrorFactory | None
    max_holders: int = DEFAULT_MAX_HOLDERS

    @property
    def limits(self) -> Mapping[str, int]:
        """``lock_limits``: the most granted entries of a tag at once (kept in the table)."""
        return self.rules.limits


def load_options(
    table: Mapping[str, Mapping[str, Sequence[str]]] | None = None, **raw: Any
) -> LockOptions:
    """Validate constructor options; raise :class:`InvalidConfiguration` naming every problem.

    ``table`` is the manager's own relationship table, taken when ``lock_relationships`` is
    ``None``; ``lock_timeouts`` and ``lock_limits`` of ``None`` set none.
    """
    if raw.get("lock_relationships") is None and table is not None:
        raw["lock_relationships"] = table
    for optional in ("lock_timeouts", "lock_limits"):
        if raw.get(optional, {}) is None:
            raw[optional] = {}
    try:
        data = _OptionsSchema().load(raw)
    except marshmallow.ValidationError as exc:
        messages = exc.messages
        problems = messages if isinstance(messages, Mapping) else {"options": messages}
        raise InvalidConfiguration(problems) from None
    return LockOptions(
        rules=build_rules(
            data["lock_relationships"],
            data["lock_timeouts"],
            data["lock_timeout"],
            data["lock_limits"],
        ),
        timeout=data["timeout"],
        w=data["w"],
        field=data["field"],
        error_factory=data["error_factory"],
        max_holders=data["max_holders"],
    )
