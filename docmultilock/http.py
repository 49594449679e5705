"""HTTP answers for lock errors: RFC 9457 problem details, a Starlette handler, error factories.

:func:`to_problem` turns a :class:`~docmultilock.LockError` into a problem-details dict.
The rest answers it through a web framework, so a handler needs no ``try``/``except`` for
lock errors:

* FastAPI and Starlette: :func:`install_problem_handler` registers :func:`problem_response`
  as the app's exception handler for :class:`~docmultilock.LockError`. Every lock error a
  handler lets through (``await locks.acquire(...)``, ``async with locks.hold(...)``,
  ``held.require(...)``) is answered as ``application/problem+json`` with its status::

      from docmultilock.http import install_problem_handler
      app = FastAPI()
      install_problem_handler(app)   # 409 {"type": ..., "title": ..., "status": 409, ...}

  Give the lock managers no ``error_factory`` then: the handler wants the ``LockError``.
* Werkzeug and Flask: pass :func:`werkzeug_error` as ``error_factory=``; the lock manager
  raises werkzeug's exception for the status, carrying a ready ``application/problem+json``
  response, with the original error as ``__cause__``::

      from docmultilock.http import werkzeug_error
      locks = WriteLock(db.orders, error_factory=werkzeug_error)  # Flask answers 409

* Django: put :class:`DjangoProblemMiddleware` in ``MIDDLEWARE``; every lock error a view
  lets through is answered as ``application/problem+json`` with its status::

      MIDDLEWARE = [..., "docmultilock.http.DjangoProblemMiddleware"]

* :func:`starlette_error` is kept for code that uses it: an ``error_factory`` raising a
  Starlette ``HTTPException`` whose ``detail`` is the problem. FastAPI's default handler
  nests it, ``{"detail": {...problem...}}``, as plain ``application/json``; plain
  Starlette's needs a string ``detail``. Prefer the handler.

Werkzeug, Starlette and Django are optional: each is imported only when a function that
needs it is called.

Problem ``type`` URIs are URNs, ``urn:docmultilock:error:<code>`` with ``code`` the error's
class name (``urn:docmultilock:error:LockAlreadyTaken``). They identify the error kind and
stay stable across releases; they are names, not web pages to fetch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from docmultilock.errors import LockError

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from werkzeug.exceptions import HTTPException as WerkzeugHTTPException

__all__ = [
    "PROBLEM_JSON",
    "TYPE_PREFIX",
    "DjangoProblemMiddleware",
    "install_problem_handler",
    "problem_response",
    "starlette_error",
    "to_problem",
    "werkzeug_error",
]

log = logging.getLogger("docmultilock")

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


def _log_server_failure(method: str, path: str, err: LockError) -> None:
    """Log a server-side failure (5xx) with its traceback: its problem leaves the message out."""
    if err.status_code >= 500:
        log.error("%s %s answered %d: %s", method, path, err.status_code, err.code, exc_info=err)


def _missing(package: str, name: str) -> ImportError:
    """The ImportError of ``docmultilock.http.<name>`` when ``package`` is not installed."""
    return ImportError(f"docmultilock.http.{name} needs {package}: pip install {package}")


async def problem_response(request: Request, exc: Exception) -> Response:
    """Answer a :class:`~docmultilock.LockError` as ``application/problem+json``.

    A Starlette/FastAPI exception handler: the body is :func:`to_problem` of the error, at
    the top level (RFC 9457, no ``{"detail": ...}`` around it), and the status is
    ``exc.status_code``. A server-side failure (5xx) is also logged with its traceback on
    the ``docmultilock`` logger, since its problem leaves the message out. Register it with
    :func:`install_problem_handler`, or by hand::

        app = Starlette(routes=routes, exception_handlers={LockError: problem_response})

    :raises ImportError: starlette is not installed.
    """
    if not isinstance(exc, LockError):
        # Registered for another class by mistake: leave the exception to the app's
        # error middleware rather than answer it as a lock problem.
        raise exc
    try:
        from starlette.responses import JSONResponse
    except ImportError as err:
        raise _missing("starlette", "problem_response") from err
    _log_server_failure(request.method, request.url.path, exc)
    return JSONResponse(to_problem(exc), exc.status_code, media_type=PROBLEM_JSON)


def install_problem_handler(app: Starlette) -> None:
    """Answer every :class:`~docmultilock.LockError` that reaches ``app`` as problem JSON.

    ``app`` is a Starlette or FastAPI application (FastAPI's subclasses Starlette's); the
    handler is :func:`problem_response`. Lock managers used by the app should have no
    ``error_factory``, so that their errors reach it as ``LockError``::

        app = FastAPI()
        install_problem_handler(app)
    """
    app.add_exception_handler(LockError, problem_response)


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
        raise _missing("werkzeug", "werkzeug_error") from exc
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

    Kept for compatibility; prefer :func:`install_problem_handler`. FastAPI's default
    handler for this class answers the problem nested under ``detail``,
    ``{"detail": {...the problem...}}``, as ``application/json`` (not problem JSON), with
    ``err.status_code``::

        locks = WriteLock(db.orders, error_factory=starlette_error)

    Plain Starlette's default handler needs a string ``detail``; see the module docs.

    :raises ImportError: starlette is not installed.
    """
    try:
        from starlette.exceptions import HTTPException
    except ImportError as exc:
        raise _missing("starlette", "starlette_error") from exc
    # Starlette annotates ``detail`` as str for its plain-text handler; FastAPI's subclass
    # declares it Any and JSON-encodes it, which is the handler this factory serves.
    detail: Any = to_problem(err)
    return HTTPException(err.status_code, detail=detail)


class DjangoProblemMiddleware:
    """Django middleware: answer a :class:`~docmultilock.LockError` from any view as problem JSON.

    Listed in ``MIDDLEWARE`` (``"docmultilock.http.DjangoProblemMiddleware"``), it answers
    every ``LockError`` a view lets through with :func:`to_problem` as
    ``application/problem+json`` and the error's status (409 while another holds the
    record, 404 for an unknown one), so views need no ``try`` for lock errors. A
    server-side failure (5xx) is also logged with its traceback on the ``docmultilock``
    logger, since its problem leaves the message out. Other exceptions are Django's.
    """

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        """Answer ``request`` through the next layer (its exceptions come to the hook below)."""
        return self.get_response(request)

    def process_exception(self, request: Any, exception: Exception) -> Any:
        """Django's hook: the problem response for a ``LockError``, else ``None`` (not ours).

        :raises ImportError: Django is not installed.
        """
        if not isinstance(exception, LockError):
            return None
        try:
            from django.http import HttpResponse  # type: ignore[import-untyped]
        except ImportError as err:
            raise _missing("django", "DjangoProblemMiddleware") from err
        _log_server_failure(request.method, request.path, exception)
        return HttpResponse(
            json.dumps(to_problem(exception)),
            status=exception.status_code,
            content_type=PROBLEM_JSON,
        )
