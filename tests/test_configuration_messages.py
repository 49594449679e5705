"""Limits configuration: refusals in plain words, for every reason a limit cannot hold.

No marshmallow internals (nested dicts, ``'_schema'``, list brackets) in a message; an
undeclared tag lists the declared ones; a limit that can never be reached, or that means
nothing, is refused with the reason; the server's cap refusal names ``max_holders``.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.collection import Collection

from docmultilock import InvalidConfiguration, MultiLock, NamedLocks, TooManyHolders
from tests.flavours import MakeLock

Doc = dict[str, Any]

#: Options refused for each reason, beside MultiLock's default readers-writer table.
BAD: dict[str, dict[str, Any]] = {
    "not an int": {"lock_limits": {"read": 2.5}},
    "undeclared and not an int": {"lock_limits": {"export": "3"}},
    "below 1": {"lock_limits": {"read": 0}},
    "not a mapping": {"lock_limits": 5},
    "max_holders too large": {"max_holders": 10**7},
    "a bad lifetime": {"lock_timeouts": {"read": "soon"}},
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_refused_configuration_shows_no_marshmallow_internals(
    collection: Collection[Doc], case: str
) -> None:
    with pytest.raises(InvalidConfiguration) as exc:
        MultiLock(collection, **BAD[case])
    text = str(exc.value)
    for internal in ("{", "[", "_schema", "'value'", "Not a valid"):
        assert internal not in text, (internal, text)


def test_a_limit_of_an_undeclared_tag_lists_the_declared_ones(collection: Collection[Doc]) -> None:
    with pytest.raises(
        InvalidConfiguration,
        match=r"lock_limits: 'export' is not a declared tag \(declared: 'read', 'write'\)",
    ):
        MultiLock(collection, lock_limits={"export": 3})


def test_a_limit_above_max_holders_is_refused_as_never_reached(
    collection: Collection[Doc],
) -> None:
    with pytest.raises(
        InvalidConfiguration,
        match=r"the limit of 'read' \(5\) can never be reached: max_holders allows 3",
    ):
        MultiLock(collection, lock_limits={"read": 5}, max_holders=3)


@pytest.mark.parametrize("cls", [MultiLock, NamedLocks])
def test_a_limit_on_a_tag_cooperative_with_itself_is_refused_as_meaningless(
    collection: Collection[Doc], cls: type[Any]
) -> None:
    where = collection if cls is MultiLock else collection.database
    with pytest.raises(
        InvalidConfiguration, match=r"'write' is cooperative with itself: .*means nothing"
    ):
        cls(where, lock_limits={"write": 2})


def test_the_cap_refusal_names_max_holders(
    make_lock: MakeLock, collection: Collection[Doc], doc: Doc
) -> None:
    locks = make_lock(MultiLock, collection, max_holders=1)
    locks.acquire(doc, tag="read")
    with pytest.raises(TooManyHolders, match=r"the most max_holders allows") as exc:
        locks.acquire(doc, tag="read")
    assert exc.value.limit == 1
