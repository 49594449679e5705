"""A lock command sent is seen through to its reply before a cancellation goes on (_settle)."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from docmultilock import _settle as settle
from docmultilock._settle import AsyncSettle, Settle


class Command:
    """A command that takes ``seconds`` to answer; records whether it ended."""

    def __init__(self, seconds: float, fails: bool = False) -> None:
        self.seconds = seconds
        self.fails = fails
        self.ended = False

    async def run(self) -> str:
        await asyncio.sleep(self.seconds)
        self.ended = True
        if self.fails:
            raise ConnectionError("the reply was lost")
        return "reply"


def _cancelled_while_out(command: Command, cancels: int = 1) -> bool:
    """Cancel a caller of ``command`` ``cancels`` times while it is out; whether it had ended
    when the caller's CancelledError came."""

    async def main() -> bool:
        caller = asyncio.ensure_future(AsyncSettle.reply(command.run(), 5.0))
        for _ in range(cancels):
            await asyncio.sleep(command.seconds / 10)
            caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        return command.ended

    return asyncio.run(main())


def test_the_reply_comes_back_when_nothing_cancels() -> None:
    assert asyncio.run(AsyncSettle.reply(Command(0.01).run(), 5.0)) == "reply"


def test_a_cancellation_goes_on_only_once_the_command_ended() -> None:
    assert _cancelled_while_out(Command(0.3))


def test_every_further_cancellation_waits_for_the_same_end() -> None:
    assert _cancelled_while_out(Command(0.3), cancels=3)


def test_a_command_that_fails_after_the_cancellation_still_ends_in_the_cancellation() -> None:
    assert _cancelled_while_out(Command(0.3, fails=True))


def test_a_cancellation_of_the_command_itself_reaches_the_caller() -> None:
    async def main() -> None:
        command = asyncio.ensure_future(Command(5.0).run())
        caller = asyncio.ensure_future(AsyncSettle.reply(command, 5.0))
        await asyncio.sleep(0.05)
        command.cancel()  # as a loop's shutdown cancels every task
        with pytest.raises(asyncio.CancelledError):
            await caller

    asyncio.run(main())


def _given_up(limit: float | None) -> tuple[bool, bool]:
    """Cancel a caller of a command that never answers; (caller ended, command cancelled)."""

    async def main() -> tuple[bool, bool]:
        command = asyncio.ensure_future(Command(60.0).run())
        caller = asyncio.ensure_future(AsyncSettle.reply(command, limit))
        await asyncio.sleep(0.05)
        caller.cancel()
        done, _ = await asyncio.wait((caller,), timeout=10.0)
        await asyncio.sleep(0)  # the command's own cancellation is delivered
        return bool(done), command.cancelled()

    return asyncio.run(main())


def test_a_command_that_never_answers_is_given_up_after_its_limit() -> None:
    assert _given_up(0.2) == (True, True)


def test_a_command_without_a_timeout_is_given_up_after_the_cleanup_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(settle, "CLEANUP_LIMIT", 0.2)
    assert _given_up(None) == (True, True)


def test_an_anyio_cancel_scope_waits_for_the_command_too() -> None:
    command = Command(0.3)

    async def main() -> None:
        with anyio.move_on_after(0.05):
            await AsyncSettle.reply(command.run(), 5.0)

    anyio.run(main)
    assert command.ended


def test_the_sync_flavour_hands_back_the_value() -> None:
    assert Settle.reply("reply", 5.0) == "reply"
