"""HTTP answers for lock errors: RFC 9457 problem details and ready ``error_factory`` functions.

:func:`to_problem` turns a :class:`~docmultilock.LockError` into a problem-details dict.
The factories turn it into a web framework's own HTTP exception, so a handler needs no
``try``/``except`` of its own: pass one as ``error_factory=`` and the lock manager raises the
framework's exception instead, with the original error as ``__cause__``::

    from docmultilock.http import werkzeug_error
    locks = WriteLock(db.orders, error_factory=werkzeug_error)  # Flask answers 409 on conflict

* :func:`werkzeug_error` (Flask, any werkzeug app): the exception carries a ready
  ``application/problem+json`` response with the error's status.
* :func:`starlette_error` (FastAPI, Starlette): an ``HTTPException`` whose ``detail`` is the
  problem dict. FastAPI's default handler answers ``{"detail": {...problem...}}`` as JSON.
  Plain Starlette's default handler writes ``detail`` as text and needs a string, so there,
  skip ``error_factory`` and register a handler for :class:`~docmultilock.LockError`::

      async def on_lock_error(request: Request, exc: Exception) -> Response:
          assert isinstance(exc, LockError)
          return JSONResponse(to_problem(exc), exc.status_code, media_type=PROBLEM_JSON)

      app = Starlette(routes=routes, exception_handlers={LockError: on_lock_error})

Werkzeug and Starlette are optional: each is imported only when its factory is called.

Problem ``type`` URIs are URNs, ``urn:docmultilock:error:<code>`` with ``code`` the error's
class name (``urn:docmultilock:error:LockAlreadyTaken``). They identify the error kind and
stay stable across releases; they are names, not web pages to fetch.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from docmultilock.errors import (
    LockError,
)

if TYPE_CHECKING:
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from werkzeug.exceptions import HTTPException as WerkzeugHTTPException

__all__ = ["PROBLEM_JSON", "TYPE_PREFIX", "starlette_error", "to_problem", "werkzeug_error"]

#: The media type of an RFC 9457 problem-details body.
PROBLEM_JSON = "application/problem+json"

#: Every problem ``type`` is this prefix followed by the error's ``code`` (its class name).
TYPE_PREFIX = "urn:docmultilock:error:"

#: What a client is told about a server-side failure (status 5xx) instead of its message.
_SERVER_DETAIL = "The server could not complete the lock operation."

#: Members of ``LockError.to_dict()`` that repeat a standard member (``status``, ``detail``).
_REPEATED = frozenset({"status_code", "message"})


def to_problem(err: LockError) -> dict[str, Any]:
    """Return an RFC 9457 problem-details dict for ``err``; JSON-safe.

    Standard members: ``type`` (``urn:docmultilock:error:<code>``), ``title`` (``err.title``,
    fixed per error class), ``status`` (``err.status_code``) and ``detail`` (``err.message``).
    The data of :meth:`~docmultilock.LockError.to_dict` follows as extension members:
    ``code`` always, then ``filter``, ``blocking_tags``, ``lock`` or ``lock_id`` as the error
    carries them.

    A server-side failure (status 5xx: :class:`~docmultilock.DbError`,
    :class:`~docmultilock.IncompatibleLockField`) is not the client's to fix, and its message
    can name database hosts and internals; its problem keeps only ``code`` and a fixed
    ``detail``. The full error stays on the raised exception (``__cause__`` with an
    ``error_factory``) for the server's logs.

    ::

        problem = to_problem(err)   # {"type": "urn:docmultilock:error:LockAlreadyTaken",
                                    #  "title": "Lock already taken", "status": 409, ...}
    """
    problem: dict[str, Any] = {
        "type": TYPE_PREFIX + err.code,
        "title": err.title,
        "status": err.status_code,
    }
    if err.status_code >= 500:
        problem.update(detail=_SERVER_DETAIL, code=err.code)
        return problem
    problem["detail"] = err.message
    for key, value in err.to_dict().items():
        # setdefault: an extension member never replaces a standard one.
        if key not in _REPEATED:
            problem.setdefault(key, value)
    return problem


def werkzeug_error(err: LockError) -> WerkzeugHTTPException:
    """Return a werkzeug ``HTTPException`` answering ``err`` as ``application/problem+json``.

    The exception is werkzeug's class for the status (``Conflict`` for 409, ``NotFound`` for
    404, ...), so Flask's ``errorhandler(409)`` and ``errorhandler(Conflict)`` still apply;
    left unhandled, it answers with its ready response::

        locks = WriteLock(db.orders, error_factory=werkzeug_error)

    :raises ImportError: werkzeug is not installed.
    """
    try:
        from werkzeug.exceptions import HTTPException, default_exceptions
        from werkzeug.wrappers import Response
    except ImportError as exc:
        raise ImportError(
            "docmultilock.http.werkzeug_error needs werkzeug: pip install werkzeug"
        ) from exc
    problem = to_problem(err)
    response = Response(json.dumps(problem), status=err.status_code, content_type=PROBLEM_JSON)
    cls = default_exceptions.get(err.status_code)
    if cls is None:  # a status werkzeug has no class for, from a user's own LockError
        generic = HTTPException(description=problem["detail"], response=response)
        generic.code = err.status_code
        return generic
    return cls(description=problem["detail"], response=response)


def starlette_error(err: LockError) -> StarletteHTTPException:
    """Return a Starlette ``HTTPException`` with ``err``'s status and its problem as ``detail``.

    FastAPI registers its default handler for this Starlette class (its own
    ``HTTPException`` subclasses it), which answers ``{"detail": {...the problem...}}`` as
    JSON with ``err.status_code``::

        locks = WriteLock(db.orders, error_factory=starlette_error)

    Plain Starlette's default handler needs a string ``detail``; see the module docs.

    :raises ImportError: starlette is not installed.
    """
    try:
        from starlette.exceptions import HTTPException
    except ImportError as exc:
        raise ImportError(
            "docmultilock.http.starlette_error needs starlette: pip install starlette"
        ) from exc
    # Starlette annotates ``detail`` as str for its plain-text handler; FastAPI's subclass
    # declares it Any and JSON-encodes it, which is the handler this factory serves.
    detail: Any = to_problem(err)
    return HTTPException(err.status_code, detail=detail)
