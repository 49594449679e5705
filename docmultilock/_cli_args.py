"""What every command-line subcommand shares: argument types and safe-to-print URIs.

Imported by :mod:`docmultilock.cli` and by ``_cli_ops`` (which ``cli`` imports lazily), so
neither needs the other for these.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

__all__ = ["add_subcommand", "hosts", "seconds"]


def add_subcommand(
    commands: argparse._SubParsersAction[Any],
    name: str,
    texts: tuple[str, str],
    /,
    **defaults: Any,
) -> Any:
    """Add the subcommand ``name`` with ``texts`` as its (help line, description).

    ``defaults`` are what its parsed arguments carry (the handler, above all).
    """
    short, description = texts
    parser = commands.add_parser(name, help=short, description=description)
    parser.set_defaults(command=name, **defaults)
    return parser


def seconds(text: str) -> float:
    """An argparse type: seconds, more than 0 and at most an hour."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, not {text!r}") from None
    if not 0 < value <= 3600:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600, not {text}")
    return value


def hosts(uri: str) -> str:
    """Return the hosts part of a MongoDB URI: no credentials or options, safe to print."""
    match = re.match(r"^mongodb(?:\+srv)?://(?:[^@/]*@)?([^/?]*)", uri)
    return match.group(1) if match else "the server given"
