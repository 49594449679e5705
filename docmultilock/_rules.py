"""The tag-relationship table: which tags refuse each other, which wait for each other.

A acquiring with A *cooperative* with B is refused while any live B entry (held or pending)
is on the document. A *assertive* with B registers A as pending while live B entries remain,
and the caller waits for them to drain. Tags with no relationship are concurrent. A tag's
limit (``lock_limits``) refuses it while that many entries of it are granted.

The table is validated once here; the server-side decision (``_acquiring``), the reader of
its answer (``_plans``), the reply's shape (``_reply``), the conversion (``_converting``),
the waiting flow (``_holding``) and the wake-up decision (``_changes``) take their tag sets
and every predicate on tags from a :class:`TagRules`, so the rules exist in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["READ_WRITE", "WRITE_ONLY", "TagRules", "check_relationships"]

#: The classic readers-writer table: readers share, a writer excludes writers and waits
#: for readers to drain while new readers are refused (writer preference).
READ_WRITE: Mapping[str, Mapping[str, Sequence[str]]] = {
    "read": {"cooperative": ["write"]},
    "write": {"cooperative": ["write"], "assertive": ["read"]},
}

#: The WriteLock table: one tag, exclusive with itself.
WRITE_ONLY: Mapping[str, Mapping[str, Sequence[str]]] = {"write": {"cooperative": ["write"]}}


@dataclass(frozen=True, slots=True)
class TagRules:
    """A validated relationship table, each tag's lock lifetime in milliseconds, its limits."""

    cooperative: Mapping[str, frozenset[str]]
    assertive: Mapping[str, frozenset[str]]
    lifetime_ms: Mapping[str, int]
    #: ``lock_limits``: the most granted entries of a tag at once on one document or name.
    limits: Mapping[str, int] = field(default_factory=dict)

    @property
    def tags(self) -> frozenset[str]:
        """Every declared tag."""
        return frozenset(self.lifetime_ms)

    @property
    def shared(self) -> bool:
        """True when some tag shares (does not refuse itself): a field may hold many entries."""
        return any(not self.refuses_itself(tag) for tag in self.lifetime_ms)

    @property
    def limited(self) -> frozenset[str]:
        """The tags a limit can refuse (:meth:`limit` is not ``None``)."""
        return frozenset(tag for tag in self.lifetime_ms if self.limit(tag) is not None)

    def refuses_itself(self, tag: str) -> bool:
        """True when ``tag`` is cooperative with itself: exclusive among its own.

        A release then lets one waiter of ``tag`` in, not several (the wake-up's rule).
        """
        return tag in self.cooperative[tag]

    def capped(self, tag: str) -> bool:
        """True when ``tag`` may join other live entries, so the holder cap can refuse it.

        A tag cooperative with every tag (WriteLock's ``write``) is refused by any live entry
        before the cap could matter: its pipeline leaves the cap out.
        """
        return self.cooperative[tag] != self.tags

    def lone(self, tag: str) -> bool:
        """True when ``tag`` is the table's only tag and refuses itself: every entry is of it.

        Its fresh acquire has a pipeline of its own (``_acquiring``), and its replies need
        not list the tags in the way: there is no other.
        """
        return self.tags == {tag} and self.refuses_itself(tag)

    def drains(self, tag: str, *, fair: bool) -> frozenset[str]:
        """The tags whose entries a pending entry of ``tag`` waits for.

        Those it is assertive with; in a fair line also those it is cooperative with, as it
        waits behind every tag in the way.
        """
        if fair:
            return self.assertive[tag] | self.cooperative[tag]
        return self.assertive[tag]

    def is_downgrade(self, old: str, new: str) -> bool:
        """True when ``new`` refuses or waits for no tag ``old`` does not (a tag to itself too).

        Such a conversion meets nothing the held lock did not already stand beside, so it is
        granted at once; any other is decided as an acquisition of ``new``, and so is one to
        another tag that has a limit (``lock_limits``): it takes a place under that limit.
        """
        if new != old and self.limit(new) is not None:
            return False  # a place under ``new``'s limit is an acquisition's to decide
        return self.in_the_way(new)[0] <= self.in_the_way(old)[0]

    def limit(self, tag: str) -> int | None:
        """The most granted entries of ``tag`` at once, when a limit can ever refuse it.

        ``None`` when ``tag`` has no limit, or refuses itself: then one granted entry of it
        already refuses the next, whatever its limit (at least 1) says. The server's
        decision (``_acquiring``), the reader of its reply (``_plans``) and the wake-up
        decision (``_changes``) all read this one value.
        """
        if self.refuses_itself(tag):
            return None
        return self.limits.get(tag)

    def in_the_way(self, tag: str) -> tuple[frozenset[str], frozenset[str]]:
        """``(granted, pending)``: the tags whose entries keep a new ``tag`` from progress.

        The first are the tags whose granted entries do, the second those whose pending
        entries do. What the server decides (``_acquiring``), from the same table: a live entry of a
        tag ``tag`` is cooperative with, granted or pending, refuses it; a granted one of a
        tag it is assertive with makes it wait (a pending one of those only puts it in line
        beside them, which is progress). The wake-up decision (``_changes.Blockers``) reads
        this, so a waiter is woken exactly when its next attempt is not refused outright.
        """
        cooperative, assertive = self.cooperative[tag], self.assertive[tag]
        return cooperative | assertive, cooperative


def check_relationships(
    tags: Iterable[str], relationships: Mapping[str, Mapping[str, Iterable[str]]]
) -> list[str]:
    """Return every problem with a relationship table (empty when it is sound).

    Refused: relationships naming undeclared tags, a tag assertive with itself, a tag both
    cooperative and assertive with the same tag, and any cycle of assertive relationships
    (each side would wait for the other to drain: a deadlock).
    """
    declared = set(tags)
    problems: list[str] = []
    for tag, kinds in sorted(relationships.items()):
        cooperative = set(kinds.get("cooperative", ()))
        assertive = set(kinds.get("assertive", ()))
        for other in sorted((cooperative | assertive) - declared):
            problems.append(f"tag {tag!r} names undeclared tag {other!r}")
        if tag in assertive:
            problems.append(f"tag {tag!r} is assertive with itself (it would wait for itself)")
        for other in sorted(cooperative & assertive):
            problems.append(f"tag {tag!r} is both cooperative and assertive with {other!r}")
    problems.extend(_assertive_cycles(relationships))
    return problems


def _assertive_cycles(relationships: Mapping[str, Mapping[str, Iterable[str]]]) -> list[str]:
    """Name each cycle of assertive waits (longer than one tag) once."""
    edges = {
        tag: sorted(set(kinds.get("assertive", ())) - {tag}) for tag, kinds in relationships.items()
    }
    cycles: list[str] = []
    seen: set[frozenset[str]] = set()

    def walk(path: list[str]) -> None:
        for nxt in edges.get(path[-1], ()):
            if nxt == path[0]:
                members = frozenset(path)
                if members not in seen:
                    seen.add(members)
                    loop = " -> ".join([*path, path[0]])
                    cycles.append(f"assertive relationships form a cycle (deadlock): {loop}")
            elif nxt not in path and nxt > path[0]:
                # Only walk through tags after the start, so each cycle is found from its
                # smallest member once.
                walk([*path, nxt])

    for start in sorted(edges):
        walk([start])
    return cycles


def build_rules(
    relationships: Mapping[str, Mapping[str, Iterable[str]]],
    lifetimes_ms: Mapping[str, int],
    default_lifetime_ms: int,
    limits: Mapping[str, int] | None = None,
) -> TagRules:
    """Freeze an already checked table; every declared tag gets a lifetime, some a limit."""
    tags = set(relationships) | set(lifetimes_ms)
    return TagRules(
        cooperative={
            t: frozenset(relationships.get(t, {}).get("cooperative", ())) for t in sorted(tags)
        },
        assertive={
            t: frozenset(relationships.get(t, {}).get("assertive", ())) for t in sorted(tags)
        },
        lifetime_ms={t: lifetimes_ms.get(t, default_lifetime_ms) for t in sorted(tags)},
        limits=dict(sorted((limits or {}).items())),
    )
