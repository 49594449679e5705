"""The keep-alive's batch renewal as a flow: one ``update_many``, and a read when it fell short.

:func:`renew_together` renews the locks of several holders of one manager by one command
(``LockCore.renew_each``), reads the batch's documents when the reply's count shows fewer
renewed than named (``LockCore.batch_read``), and tells each lock's outcome
(``_batch_rules.outcomes``). A renewed lock is recorded as a lone renewal is
(``_sending.record_renewal``): its estimate starts from the send time, its ``expires_at``
moves on as a lower bound (the reply holds a count, not the new expiries), the ledger
learns of it, and the listener is told ``extended``; a lost one gets the error a lone
renewal would have raised, told ``lost``; a batch that failed or went unanswered tells nothing
(:data:`~docmultilock._batch_rules.AGAIN`), leaving every estimate as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from docmultilock._batch_rules import AGAIN, Outcome, Renewal, outcomes
from docmultilock._flows import Clock, Flow, aggregate, send_many
from docmultilock._held_lock import Holding
from docmultilock._parts import Parts
from docmultilock._sending import record_renewal, report_lost
from docmultilock.errors import LockError

__all__ = ["renew_together"]

log = logging.getLogger("docmultilock")


def renew_together(
    parts: Parts, holdings: Sequence[Holding], *, limit: float, clock: Clock
) -> Flow[tuple[list[Outcome | LockError], bool]]:
    """Renew ``holdings`` (one per document) within ``limit`` seconds, by one command.

    Returns each one's outcome (a :class:`LockError` for a lost lock, to tell its holder)
    and whether a read was needed.
    """
    core, lifetime_ms = parts.core, parts.rules.lifetime_ms
    renewals = [
        Renewal(h.lock.document_id, h.lock.id, h.lock.tag, lifetime_ms[h.lock.tag])
        for h in holdings
    ]
    spec = holdings[0].spec
    if spec.call.limit is not None:
        limit = min(limit, spec.call.limit)
    command = core.renew_each(renewals)
    sent = clock.monotonic()
    give_up = sent + limit
    read = None
    try:
        # Not by ``send_for``: an ``update_many`` and a read, for no one call, whose limit
        # is the schedule's; nor does the listener hear of a batch's retries (a lock's
        # own renewal and loss are what it is told, below).
        modified = yield from send_many(
            command, doing="renew kept-alive locks", w=spec.call.concern, limit=limit, clock=clock
        )
        if modified < len(renewals):
            read = yield from aggregate(
                core.batch_read(renewals),
                doing="read a batch of kept-alive locks",
                filter=command.filter,
                limit=max(give_up - clock.monotonic(), 0.001),
                clock=clock,
            )
    except LockError as err:
        # Unanswered or failed: nothing is known, every estimate stands (the schedule
        # renews these locks again shortly, or alone once urgent).
        log.debug("a keep-alive batch of %d locks failed: %s", len(renewals), err)
        return [AGAIN] * len(renewals), read is not None
    estimates = [sent + h.spec.lifetime for h in holdings]
    results: list[Outcome | LockError] = []
    read_at = clock.monotonic()
    took = read_at - sent
    judged = outcomes(
        renewals, modified, read, estimate=estimates, codec_options=parts.codec_options
    )
    for holding, outcome in zip(holdings, judged, strict=True):
        lock, user_filter = holding.lock, holding.spec.call.user_filter
        if outcome is None:
            lost = parts.judge.lost(lock, user_filter, "keep alive", holding.spec.member)
            report_lost(parts.events, user_filter, lock, started=sent, clock=clock, error=lost)
            results.append(lost)
            continue
        if isinstance(outcome, float):
            record_renewal(
                user_filter,
                lock,
                ledger=parts.ledger,
                events=parts.events,
                sent=sent,
                read=read_at,
                duration=took,
                holding=holding,
                batch_life=holding.spec.lifetime,
            )
        results.append(outcome)
    return results, read is not None
