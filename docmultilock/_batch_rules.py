"""Renewing kept-alive locks together: which go in one command, and what its reply means.

The keep-alive's schedule (``_schedule.Schedule``) renews a lock *alone* (one
``findAndModify``) or *in a batch*: one ``update_many`` per manager, whose pipeline
(``_pipeline.renew_each_body``) extends, in each document of the batch, the one live,
granted entry of ours the batch names for it. Here, without I/O:

* **What a batch holds** (the constants below, used by the schedule). When a renewal falls
  due, the other renewals of the same group (one manager, :class:`Batching`) due within
  ``WINDOW`` of the shortest lead go with it, most urgent first, at most ``MAX_BATCH`` of
  them, and at most one per document: a document counts once in the reply's counts, so
  with one lock per document the counts speak for each lock. A lock whose estimate is
  within ``URGENT`` of its lead is renewed alone, and a batch's time limit ends before any
  of its locks becomes urgent, so a stalled batch leaves time to renew each lock alone.
* **What a failed batch does next** (:func:`resends`). A first try gives up halfway
  (``FIRST_TRY``) to the moment its most urgent lock becomes urgent, or after a few times
  what its group's batches took lately if longer (:class:`Pace`); when it fails or goes
  unanswered, it is sent again at once, whole, with the rest of that time; when that fails
  too, its halves are sent at once. Only then, or once urgent, are its locks renewed
  alone: a server slow enough to stall one command is too slow for hundreds of lone ones.
* **What the reply means** (:func:`outcomes`). When every document was modified, every lock
  was renewed. When fewer were, a read of the batch's documents (projected to their live,
  granted entries, by the server's clock) tells: a lock still live was renewed (a write
  that left a document as it was found it renewed already, in the same millisecond); one
  not live is lost; one on a foreign field or a missing document is renewed alone, where
  the single renewal names its error.

Outcomes are a new estimate (renewed), ``None`` (lost), :data:`AGAIN` (nothing known: the
estimate stands and the lock is sent again, at once or after a pause) or :data:`ALONE`
(renew it alone next).
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions

from docmultilock._bson_identity import stored_key

__all__ = [
    "AGAIN",
    "AGAIN_PAUSE",
    "ALONE",
    "FIRST_TRY",
    "MAX_BATCH",
    "PACE_MARGIN",
    "RESEND_MARGIN",
    "URGENT",
    "WINDOW",
    "Batch",
    "Batching",
    "Outcome",
    "Pace",
    "Renewal",
    "outcomes",
    "resends",
]

K = TypeVar("K", bound=Hashable)

#: The most locks one batch renews: ids and document keys of a few dozen bytes each, far
#: under MongoDB's 16 MiB command limit. The bound is the server's time per command: the
#: embedded test server evaluates the pipeline at 7 to 10 ms per document while it serves
#: nobody else (docs/performance.md), so a batch of 250 holds it about 2 s.
MAX_BATCH = 250
#: Renewals due within this fraction of the shortest lead go with the one due now.
WINDOW = 0.5
#: A lock with less than this fraction of its lead left before its estimate is renewed
#: alone, never in a batch; a batch's time limit ends there.
URGENT = 0.5
#: After a batch whose resends failed too, its locks are due again this much later
#: (seconds), so that a failing server is not asked again in a tight loop.
AGAIN_PAUSE = 0.5
#: A batch's first try gives up at this fraction of the time left before its most urgent
#: lock becomes urgent: the rest is for sending it again (:func:`resends`).
FIRST_TRY = 0.5
#: ... but it is given at least this many times what its group's batches took lately
#: (:class:`Pace`): a batch given up on a slow server is still applied there, and sending
#: it again would only slow the server more;
PACE_MARGIN = 3.0
#: ... as long as this many times that is left for sending it again (else the first try
#: gets all the time there is: no room for two).
RESEND_MARGIN = 1.5
#: What a group's batches took lately fades by this factor at each batch answered.
PACE_FADE = 0.9


class _Verdict(enum.Enum):
    AGAIN = "again"
    ALONE = "alone"


#: Nothing is known of this lock's renewal: its estimate stands, it is sent again.
AGAIN: Final = _Verdict.AGAIN
#: This lock is renewed alone next time (its document could not be judged in a batch).
ALONE: Final = _Verdict.ALONE

#: What a batch did for one lock: its new estimate, ``None`` when lost, or a verdict.
Outcome = float | None | Literal[_Verdict.AGAIN, _Verdict.ALONE]


@dataclass(frozen=True, slots=True)
class Batching:
    """How a job may be batched: its ``group`` (one manager) and its ``place``.

    Jobs with equal groups may share a command; ``place`` names the lock's document (one
    per batch).
    """

    group: Hashable
    place: Hashable


@dataclass(frozen=True, slots=True)
class Batch(Generic[K]):
    """Renew ``jobs`` (one group) together now, within ``limit`` seconds.

    ``token`` names the batch when it is reported back (``Schedule.batch_finished``); the
    most urgent was due ``late`` seconds ago.
    """

    token: int
    jobs: tuple[K, ...]
    limit: float
    late: float


@dataclass(slots=True)
class Pace:
    """How long a group's batches took lately: the longest, fading as others answer."""

    took: float = 0.0

    def answered(self, took: float) -> None:
        """A batch of the group was answered ``took`` seconds after it was sent."""
        self.took = max(took, self.took * PACE_FADE)

    def first_try(self, left: float) -> float:
        """A first try's time limit, ``left`` seconds before its most urgent lock is urgent.

        Half of ``left``, or more for a slow group: :data:`PACE_MARGIN` times what its
        batches took, while :data:`RESEND_MARGIN` times that is left for the resend; all of
        ``left`` when a try needs that much.
        """
        needs = self.took * PACE_MARGIN
        if needs >= left:
            return left
        return max(left * FIRST_TRY, min(needs, left - self.took * RESEND_MARGIN))


@dataclass(frozen=True, slots=True)
class Renewal:
    """One lock of a batch, as the command names it."""

    document_id: Any
    lock_id: str
    tag: str
    #: The tag's default lifetime (ms): the renewal's for an entry stored without one.
    default_ms: int


def outcomes(
    renewals: Sequence[Renewal],
    modified: int,
    read: Sequence[Mapping[str, Any]] | None,
    *,
    estimate: Sequence[float],
    codec_options: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS,
) -> list[Outcome]:
    """Each lock's outcome from the batch's ``modified`` count and, when short, the ``read``.

    ``estimate`` is each lock's new estimate if renewed (the send time plus its lifetime);
    ``read`` holds, per document found, ``i`` (its ``_id``), ``ours`` (its field is ours)
    and ``live`` (the ids of its live, granted entries), as :func:`read_stages` projects;
    its ``_id``s are matched to the renewals' as stored (``codec_options``: the collection's).
    """
    if modified >= len(renewals):
        return list(estimate)
    if read is None:
        raise ValueError("a batch that renewed fewer documents than it named needs the read")
    found = {stored_key(row["i"], codec_options): row for row in read}
    result: list[Outcome] = []
    for renewal, renewed in zip(renewals, estimate, strict=True):
        row = found.get(stored_key(renewal.document_id, codec_options))
        if row is None or not row.get("ours"):
            result.append(ALONE)  # deleted, or foreign: the single renewal names why
        elif renewal.lock_id in (row.get("live") or ()):
            result.append(renewed)
        else:
            result.append(None)
    return result


def resends(failed: Sequence[K], tries: int) -> list[tuple[K, ...]]:
    """The batches to send at once after try ``tries`` (0: the first) of ``failed`` failed.

    ``failed`` are the batch's locks still kept, most urgent first. The first try is sent
    again whole; the second, in halves (one half may be a lock alone); after that, none:
    the locks wait a pause (:data:`AGAIN_PAUSE`), and are renewed alone once urgent.
    """
    if not failed or tries > 1:
        return []
    if tries == 0:
        return [tuple(failed)]
    middle = (len(failed) + 1) // 2
    return [part for part in (tuple(failed[:middle]), tuple(failed[middle:])) if part]
