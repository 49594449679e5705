"""Typing names newer than the oldest Python this package supports (3.10)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Unpack
elif sys.version_info >= (3, 11):
    from typing import Unpack
else:  # pragma: no cover - Python 3.10, where only typing_extensions has it
    # Only introspection of the ``**options`` annotations (typing.get_type_hints, the API
    # reference) needs the name at run time; typing_extensions is no dependency of ours.
    try:
        from typing_extensions import Unpack
    except ImportError:
        Unpack = None

__all__ = ["Unpack"]
