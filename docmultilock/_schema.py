"""Constructor options validated at once, so one error names every problem.

The marshmallow schema behind :func:`load_options`: each field parsed by the functions of
:mod:`docmultilock.options`, the tag table checked as a whole, and the result one
immutable :class:`~docmultilock.options.LockOptions`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import marshmallow
from marshmallow import fields, validate

from docmultilock._command import DEFAULT_MAX_HOLDERS
from docmultilock._events import KINDS
from docmultilock._rules import build_rules, check_relationships
from docmultilock.errors import InvalidArgument, InvalidConfiguration
from docmultilock.options import (
    MAX_HOLDERS_LIMIT,
    MAX_TAG_LENGTH,
    LockOptions,
    is_encodable,
    parse_duration,
    parse_field_name,
    parse_lifetime_ms,
    parse_write_concern,
)

__all__ = ["load_options"]


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
            validate.Length(min=1, max=MAX_TAG_LENGTH),
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


#: A count (a limit, ``max_holders``): a whole number from 1 to ``MAX_HOLDERS_LIMIT``.
_WHOLE = validate.Range(
    min=1, max=MAX_HOLDERS_LIMIT, error="must be a whole number from {min} to {max}, not {input}"
)
_INTEGER = {"invalid": "must be a whole number (an int), not {input!r}"}


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
        values=fields.Integer(strict=True, validate=_WHOLE, error_messages=_INTEGER),
        load_default=dict,
    )
    lock_timeout = _Parsed(lambda v: parse_lifetime_ms(v, "lock_timeout"), required=True)
    timeout = _Parsed(lambda v: parse_duration(v, "timeout"), allow_none=True, required=True)
    w = _Parsed(parse_write_concern, required=True)
    field = _Parsed(parse_field_name, required=True)
    error_factory = fields.Raw(allow_none=True, load_default=None)
    max_holders = fields.Integer(
        strict=True, load_default=DEFAULT_MAX_HOLDERS, validate=_WHOLE, error_messages=_INTEGER
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
        raw_limits = original.get("lock_limits")
        limited = raw_limits if isinstance(raw_limits, Mapping) else {}
        wrong = _limit_problems(limited, tags, relationships, data.get("max_holders"))
        if wrong:
            errors["lock_limits"] = wrong
        if errors:
            raise marshmallow.ValidationError(errors)


def _limit_problems(
    limits: Mapping[Any, Any],
    tags: set[str],
    relationships: Mapping[str, Mapping[str, Sequence[str]]],
    max_holders: object,
) -> list[str]:
    """What is wrong with ``lock_limits`` as a whole: a limit that could never refuse.

    A limit only for a declared tag (a misspelt one would limit nothing), not on a tag
    cooperative with itself (one granted lock of it already refuses the next), and no
    higher than ``max_holders`` (the cap would always refuse first).
    """
    problems: list[str] = []
    declared = ", ".join(repr(tag) for tag in sorted(tags))
    for tag, limit in sorted((t, v) for t, v in limits.items() if isinstance(t, str)):
        if tag not in tags:
            problems.append(f"{tag!r} is not a declared tag (declared: {declared})")
        elif tag in relationships.get(tag, {}).get("cooperative", ()):
            problems.append(
                f"{tag!r} is cooperative with itself: one granted {tag!r} lock already "
                "refuses the next, so a limit on it means nothing"
            )
        elif isinstance(max_holders, int) and isinstance(limit, int) and limit > max_holders:
            problems.append(
                f"the limit of {tag!r} ({limit}) can never be reached: max_holders allows "
                f"{max_holders} entries at once"
            )
    return problems


def _sentences(messages: object, where: str = "") -> list[str]:
    """The nested messages of marshmallow as plain sentences, each naming its key, if any."""
    if isinstance(messages, Mapping):
        found: list[str] = []
        for key, value in messages.items():
            if key in ("_schema", "value"):  # the whole option, or a dict's value
                found.extend(_sentences(value, where))
            elif key == "key":  # a dict's key
                found.extend(_sentences(value, f"{where}the key: "))
            else:
                found.extend(_sentences(value, f"{where}{key!r}: "))
        return found
    if isinstance(messages, (list, tuple)):
        return [sentence for item in messages for sentence in _sentences(item, where)]
    text = str(messages)
    return [where + text[:1].lower() + text[1:].rstrip(".")]


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
        nested = messages if isinstance(messages, Mapping) else {"options": messages}
        problems = {str(option): "; ".join(_sentences(told)) for option, told in nested.items()}
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
