"""The doctor's checks and exit rule, without a server where the logic is pure."""

from __future__ import annotations

from typing import Any

from pymongo.errors import OperationFailure

from docmultilock import _doctor
from docmultilock._doctor import Check


class _NoStreams:
    def watch(self, **kwargs: Any) -> Any:
        raise OperationFailure("The $changeStream stage is only supported on replica sets")


def test_without_change_streams_the_line_warns_that_waiters_poll_and_is_advisory() -> None:
    check = _doctor._change_streams(_NoStreams())  # type: ignore[arg-type]
    assert (check.ok, check.advisory) == (False, True)
    assert "fall back to polling" in check.detail
    assert "(advisory)" in _doctor.render([check])


def test_an_advisory_warning_alone_passes_and_any_other_warning_fails() -> None:
    fine = Check("version", True, "8.0")
    advisory = Check("change streams", False, "unavailable", advisory=True)
    assert _doctor.passed([fine, advisory])
    assert not _doctor.passed([fine, advisory, Check("w:majority", False, "failed")])
