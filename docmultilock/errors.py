"""Every error docmultilock raises, with the HTTP status a web handler should answer.

The tree, with ``status_code`` and the builtin each error also is::

    LockError                      (base; 500)
    ├── ResourceNotFound           404  no document matches the filter
    ├── LockConflict               409  the lock cannot be had or kept now
    │   ├── CooperativeLock        409  refused: a cooperative tag is held (.blocking_tags)
    │   │   ├── LockAlreadyTaken   409  the WriteLock case
    │   │   └── TooManyHolders     409  refused: max_holders entries, or a tag's lock_limits
    │   ├── AssertiveLock          409  registered as pending, wait and call again (.lock)
    │   ├── LockNotFound           409  the lock is no longer there (released, expired, broken)
    │   │   ├── LockWasReacquired  409  the WriteLock case
    │   │   └── LockConverted      409  a spent value: the lock was converted (.tag, .fence)
    │   └── LockTimeout            409  hold(wait=...) ran out of time (TimeoutError; .attempts)
    ├── IncompatibleLockField      500  the lock field holds something docmultilock does not own
    ├── DocumentTooLarge           507  the entry would take the document past 16 MiB
    └── DbError                    500  the database failed; the pymongo error is ``__cause__``
        ├── DbTimeout              504  ... because an operation ran out of time (TimeoutError)
        └── LocksLeftBehind        500  a refusal's clean-up failed: locks held (.left_behind)

    InvalidArgument (ValueError, TypeError)   bad input to a call; nothing was written
    └── InvalidConfiguration                  bad constructor options (.problems)

Every :class:`LockError` carries ``code`` (its class name), ``status_code``, ``title``,
``message`` and ``filter``, offers :meth:`LockError.to_dict`, prints its message, and pickles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from docmultilock._error_state import relaxed, restore

if TYPE_CHECKING:
    from docmultilock._lock import Lock

__all__ = [
    "AssertiveLock",
    "CooperativeLock",
    "DbError",
    "DbTimeout",
    "DocumentTooLarge",
    "IncompatibleLockField",
    "InvalidArgument",
    "InvalidConfiguration",
    "LockAlreadyTaken",
    "LockConflict",
    "LockConverted",
    "LockError",
    "LockNotFound",
    "LockTimeout",
    "LockWasReacquired",
    "LocksLeftBehind",
    "ResourceNotFound",
    "TooManyHolders",
]


class LockError(Exception):
    """Root of every error about a lock or its database; carries an HTTP status hint.

    :param message: what happened, for people.
    :param filter: the filter the caller passed, when the error concerns one.
    """

    title: ClassVar[str] = "Lock error"

    status_code: ClassVar[int] = 500

    def __init__(self, message: str, *, filter: Mapping[str, Any] | None = None) -> None:  # noqa: A002
        super().__init__(message)
        self.message = message
        self.filter = dict(filter) if filter is not None else None

    @property
    def code(self) -> str:
        """A stable machine-readable name: the class name."""
        return type(self).__name__

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle their positional args only; rebuild from the message and the
        # keyword data in __dict__ without calling __init__ (some take required keywords).
        return (restore, (type(self), self.message, self.__dict__))

    def to_dict(self) -> dict[str, Any]:
        """Return JSON-safe data describing the error (for logs and HTTP bodies)."""
        data: dict[str, Any] = {
            "code": self.code,
            "status_code": self.status_code,
            "message": self.message,
            "filter": relaxed(self.filter) if self.filter is not None else None,
        }
        data.update(self._extra())
        return data

    def _extra(self) -> dict[str, Any]:
        return {}


class ResourceNotFound(LockError):
    """No document matches the filter (or the lock's document is gone)."""

    title = "Document not found"

    status_code = 404


class LockConflict(LockError):
    """The lock cannot be taken or kept now; retrying later may succeed."""

    title = "Lock conflict"

    status_code = 409


class CooperativeLock(LockConflict):
    """Acquisition refused: a tag this one is cooperative with is held or pending.

    Nothing was recorded. ``blocking_tags`` names the tags in the way.
    """

    title = "Lock refused"

    def __init__(
        self,
        message: str,
        *,
        filter: Mapping[str, Any] | None = None,  # noqa: A002
        blocking_tags: tuple[str, ...] = (),
        document_id: Any = None,
    ) -> None:
        super().__init__(message, filter=filter)
        self.blocking_tags = tuple(blocking_tags)
        #: The ``_id`` of the document that refused, when the server named it (a waiter
        #: watches that document for changes).
        self.document_id = document_id

    def _extra(self) -> dict[str, Any]:
        return {"blocking_tags": list(self.blocking_tags)}


class LockAlreadyTaken(CooperativeLock):
    """A :class:`~docmultilock.WriteLock` acquisition refused: the document is locked."""

    title = "Lock already taken"


class TooManyHolders(CooperativeLock):
    """Acquisition refused: a limit on the number of holders is reached.

    Either the lock field already holds ``limit`` live entries (``max_holders``; ``tag`` is
    ``None``), or ``limit`` granted entries of ``tag``, the limit ``lock_limits`` sets for
    it. Nothing was recorded; a place frees up as holders release or expire, so
    ``hold(wait=...)`` waits for one like for any refusal. ``blocking_tags`` is empty.
    """

    title = "Too many holders"

    def __init__(
        self,
        message: str,
        *,
        filter: Mapping[str, Any] | None = None,  # noqa: A002
        limit: int = 0,
        tag: str | None = None,
        document_id: Any = None,
    ) -> None:
        super().__init__(message, filter=filter, document_id=document_id)
        self.limit = limit
        #: The tag whose ``lock_limits`` entry refused; ``None`` for ``max_holders``.
        self.tag = tag

    def _extra(self) -> dict[str, Any]:
        return {**super()._extra(), "limit": self.limit, "tag": self.tag}


class AssertiveLock(LockConflict):
    """The lock was registered as pending; tags it waits for are still held.

    Call ``acquire(filter, lock=err.lock)`` again until it returns the lock. Each such call
    renews the pending entry, so a waiter that stops asking stops blocking others.
    """

    title = "Lock pending"

    def __init__(
        self,
        message: str,
        *,
        lock: Lock,
        filter: Mapping[str, Any] | None = None,  # noqa: A002
        blocking_tags: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, filter=filter)
        self.lock = lock
        self.blocking_tags = tuple(blocking_tags)

    def _extra(self) -> dict[str, Any]:
        from docmultilock._lock import LockSchema

        return {"blocking_tags": list(self.blocking_tags), "lock": LockSchema().dump(self.lock)}


class LockNotFound(LockConflict):
    """The lock is no longer on the document: released already, expired, or broken.

    A second release of the same lock raises it too: the first removed the entry.
    """

    title = "Lock not found"

    def __init__(
        self,
        message: str,
        *,
        lock: Lock,
        filter: Mapping[str, Any] | None = None,  # noqa: A002
    ) -> None:
        super().__init__(message, filter=filter)
        self.lock = lock

    def _extra(self) -> dict[str, Any]:
        return {"lock_id": self.lock.id}


class LockWasReacquired(LockNotFound):
    """A :class:`~docmultilock.WriteLock` is no longer held: it expired or another took it."""

    title = "Lock was reacquired"


class LockConverted(LockNotFound):
    """The :class:`~docmultilock.Lock` given is spent: ``convert()`` made another of its lock.

    Only the one it returned (tag ``tag``, fence ``fence``) acts on the still held lock now.
    """

    title = "Lock converted"

    def __init__(
        self,
        message: str,
        *,
        lock: Lock,
        tag: str,
        fence: int,
        filter: Mapping[str, Any] | None = None,  # noqa: A002
    ) -> None:
        super().__init__(message, lock=lock, filter=filter)
        self.tag, self.fence = tag, fence  # the converted lock's: the value to use

    def _extra(self) -> dict[str, Any]:
        return {**super()._extra(), "tag": self.tag, "fence": self.fence}


class LockTimeout(LockConflict, TimeoutError):
    """Waiting for the lock (``hold(..., wait=...)``) ran out of time; nothing is left behind.

    The last refusal is ``__cause__``. ``attempts`` counts the acquisitions tried,
    ``waited`` the seconds spent, and ``blocking_tags`` names the tags in the way at the end.
    """

    title = "Lock wait timed out"

    def __init__(
        self,
        message: str,
        *,
        filter: Mapping[str, Any] | None = None,  # noqa: A002
        attempts: int,
        waited: float,
        blocking_tags: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message, filter=filter)
        self.attempts = attempts
        self.waited = waited
        self.blocking_tags = tuple(blocking_tags)

    def _extra(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "waited": self.waited,
            "blocking_tags": list(self.blocking_tags),
        }


class IncompatibleLockField(LockError):
    """The document's lock field holds data docmultilock did not write (or a newer layout).

    Nothing was written: the library never overwrites what it does not own.
    """

    title = "Incompatible lock field"


class DocumentTooLarge(LockError):
    """The lock's entry would take the document past MongoDB's 16 MiB limit.

    Nothing was written. The document itself is close to the limit; lower ``max_holders``
    or keep large documents' locks in :class:`~docmultilock.NamedLocks`.
    """

    title = "Document too large"

    status_code = 507


class DbError(LockError):
    """The database operation failed; the original pymongo error is ``__cause__``."""

    title = "Database error"


class DbTimeout(DbError, TimeoutError):
    """The database operation did not finish within ``timeout``."""

    title = "Database timeout"

    status_code = 504


class LocksLeftBehind(DbError):
    """A refused acquisition could not give back the locks it took: they are still held.

    Raised by ``acquire_all``, ``hold_all`` and ``hold(wait=...)`` when the refusal (or the
    wait that ran out) is ``__cause__`` and the release of what the call took failed until
    each lock's lifetime ran out. ``left_behind`` holds ``(key, lock)`` for each lock left
    (granted, or a pending entry), so the caller can release it (``release(key, lock)``);
    otherwise it keeps others out until it expires. ``failure`` is the release's last error.
    """

    title = "Locks left behind"

    def __init__(
        self,
        message: str,
        *,
        left_behind: tuple[tuple[Any, Lock], ...],
        failure: LockError,
        filter: Mapping[str, Any] | None = None,  # noqa: A002
    ) -> None:
        super().__init__(message, filter=filter)
        self.left_behind = tuple(left_behind)
        self.failure = failure

    @classmethod
    def after(
        cls, refusal: BaseException, left: list[tuple[Any, Lock]], failure: LockError
    ) -> LocksLeftBehind:
        """The error for ``refusal`` (raise it ``from`` that) when ``left`` stayed held."""
        locks = "; ".join(
            f"{lock.tag!r} lock {lock.id}{' (pending)' if lock.pending else ''} on {key!r}"
            for key, lock in left
        )
        return cls(
            f"{refusal} (and {len(left)} lock(s) this call took could not be released: "
            f"{failure}; each stays held until it expires unless released: {locks})",
            left_behind=tuple(left),
            failure=failure,
            filter=getattr(refusal, "filter", None),
        )

    def _extra(self) -> dict[str, Any]:
        from docmultilock._lock import LockSchema

        return {
            "left_behind": [
                {"key": relaxed(key), "lock": LockSchema().dump(lock)}
                for key, lock in self.left_behind
            ]
        }


class InvalidArgument(ValueError, TypeError):
    """A call received input it cannot use safely; nothing was written."""


class InvalidConfiguration(InvalidArgument):
    """Constructor options are invalid; ``problems`` maps each option to what is wrong."""

    def __init__(self, problems: Mapping[str, Any]) -> None:
        self.problems = dict(problems)
        super().__init__(self._format(self.problems))

    @staticmethod
    def _format(problems: Mapping[str, Any]) -> str:
        lines = [f"{key}: {value}" for key, value in sorted(problems.items())]
        return "invalid configuration: " + "; ".join(lines)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))
