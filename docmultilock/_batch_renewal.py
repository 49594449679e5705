"""The keep-alive's batch renewal as a flow: one ``update_many``, and a read when it fell short.

:func:`renew_together` renews the locks of several holders of one manager by one command
(``LockCore.renew_each``), reads the batch's documents when the reply's count shows fewer
renewed than named (``LockCore.batch_read``), and tells each lock's outcome
(``_batch_rules.outcomes``). A renewed lock's estimate starts from the send time, as after a
lone renewal, and its ``expires_at`` moves on as a lower bound (``_held_lock.Holding.renewed``:
the reply holds a count, not the new expiries); the ledger learns of the renewal, and the
listener is told ``extended`` with that lock; a lost one gets the error a lone renewal
would have raised, told ``lost``; a batch that failed or went unanswered tells nothing
(:data:`~docmultilock._batch_rules.AGAIN`), leaving every estimate as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from docmultilock._batch_rules import AGAIN, Outcome, Renewal, outcomes
from docmultilock._flows import Clock, Flow, aggregate, send_many
from docmultilock._held_lock import Holding
from docmultilock._lock_flows import LockOperations
from docmultilock.errors import LockError

__all__ = ["renew_together"]

log = logging.getLogger("docmultilock")


def renew_together(
    ops: LockOperations, holdings: Sequence[Holding], *, limit: float, clock: Clock
) -> Flow[tuple[list[Outcome | LockError], bool]]:
    """Renew ``holdings`` (one per document) within ``limit`` seconds, by one command.

    Returns each one's outcome (a :class:`LockError` for a lost lock, to tell its holder)
    and whether a read was needed.
    """
    core = ops.core
    renewals = [
        Renewal(h.lock.document_id, h.lock.id, h.lock.tag, core.rules.lifetime_ms[h.lock.tag])
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
    judged = outcomes(renewals, modified, read, estimate=estimates, codec_options=ops.codec_options)
    for holding, outcome in zip(holdings, judged, strict=True):
        lock, user_filter = holding.lock, holding.spec.call.user_filter
        if outcome is None:
            lost = core.judge.lost(lock, user_filter, "keep alive", holding.spec.member)
            ops.report_lost(user_filter, lock, sent, clock, lost)
            results.append(lost)
            continue
        if isinstance(outcome, float):
            renewed = holding.renewed(sent, read=read_at)
            # A release whose reply is lost is judged by the ledger's expiry: it must
            # know of this renewal (the reply carries no new expiry to record).
            ops.ledger.renewed(lock.id, sent=sent, life=holding.spec.lifetime)
            ops.events.emit("extended", user_filter, tag=lock.tag, lock=renewed, duration=took)
        results.append(outcome)
    return results, read is not None
