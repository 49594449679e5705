"""Sphinx configuration for the docmultilock documentation (MyST Markdown, autodoc)."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# Document the source tree next to this file even when it is not installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

project = "docmultilock"
author = "The docmultilock developers"
copyright = "the docmultilock developers"  # noqa: A001 - the name Sphinx reads
try:
    release = version("docmultilock")
except PackageNotFoundError:
    release = "0+unknown"
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
# The docs env (tox's `docs` extra) has no pytest; only the plugin module's docstring is used.
# Nor the mappers (optional extras): their modules' own classes and functions are documented.
autodoc_mock_imports = ["pytest", "beanie", "mongoengine", "pydantic", "django"]

html_theme = "furo"
html_static_path = ["_static"]
html_css_files = ["docmultilock.css"]
html_title = f"docmultilock {release}"

# There is no intersphinx (the docs build offline), so references to the standard library
# and to pymongo in signatures cannot resolve. Ignore exactly those names, nothing broader,
# so that any other broken reference still fails the build.
nitpick_ignore = [
    ("py:class", "asyncio.Event"),
    ("py:class", "collections.abc.Callable"),
    ("py:class", "collections.abc.Iterator"),
    ("py:class", "collections.abc.Mapping"),
    ("py:class", "collections.abc.Sequence"),
    ("py:class", "contextlib.AbstractContextManager"),
    ("py:class", "datetime.datetime"),
    ("py:class", "datetime.timedelta"),
    ("py:class", "os.PathLike"),
    ("py:class", "pymongo.MongoClient"),
    ("py:class", "pymongo.asynchronous.collection.AsyncCollection"),
    ("py:class", "pymongo.asynchronous.database.AsyncDatabase"),
    ("py:class", "pymongo.synchronous.collection.Collection"),
    ("py:class", "pymongo.synchronous.database.Database"),
    ("py:class", "threading.Event"),
    # require()'s type variable: it returns what it is given.
    ("py:class", "docmultilock._async.held.T"),
    ("py:class", "docmultilock._sync.held.T"),
    # A record manager's record type, and what its mapper module gives it (private).
    ("py:class", "docmultilock._async.records.R"),
    ("py:class", "docmultilock._sync.records.R"),
    ("py:class", "docmultilock._async.records.RecordMapper"),
    ("py:class", "docmultilock._sync.records.RecordMapper"),
    ("py:class", "docmultilock.mappers.beanie.D"),
    ("py:class", "docmultilock.mappers.mongoengine.D"),
    ("py:class", "docmultilock.mappers.django.M"),
    ("py:class", "docmultilock.mappers.django.L"),
    # The optional frameworks' exceptions, named under TYPE_CHECKING in docmultilock.http.
    ("py:class", "StarletteHTTPException"),
    ("py:class", "WerkzeugHTTPException"),
    ("py:class", "Starlette"),
    ("py:class", "Request"),
    ("py:class", "Response"),
    # What hold() returns: private context managers, entered at once; the API reference documents
    # the HeldLock(s) and AsyncHeldLock(s) they yield instead.
    ("py:class", "docmultilock._sync.held.Hold"),
    ("py:class", "docmultilock._async.held.AsyncHold"),
    ("py:class", "docmultilock._sync.held.HoldAll"),
    ("py:class", "docmultilock._async.held.AsyncHoldAll"),
]
