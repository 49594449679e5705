"""A lock command sent is seen through to its reply before a cancellation goes on (_settle)."""

from __future__ import annotations

import asyncio

import pytest

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
        caller = asyncio.ensure_future(AsyncSettle.reply(command.run()))
        for _ in range(cancels):
            await asyncio.sleep(command.seconds / 10)
            caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        return command.ended

    return asyncio.run(main())


def test_the_reply_comes_back_when_nothing_cancels() -> None:
    assert asyncio.run(AsyncSettle.reply(Command(0.01).run())) == "reply"


def test_a_cancellation_goes_on_only_once_the_command_ended() -> None:
    assert _cancelled_while_out(Command(0.3))


def test_every_further_cancellation_waits_for_the_same_end() -> None:
    assert _cancelled_while_out(Command(0.3), cancels=3)


def test_a_command_that_fails_after_the_cancellation_still_ends_in_the_cancellation() -> None:
    assert _cancelled_while_out(Command(0.3, fails=True))


def test_a_cancellation_of_the_command_itself_reaches_the_caller() -> None:
    async def main() -> None:
        command = asyncio.ensure_future(Command(5.0).run())
        caller = asyncio.ensure_future(AsyncSettle.reply(command))
        await asyncio.sleep(0.05)
        command.cancel()  # as a loop's shutdown cancels every task
        with pytest.raises(asyncio.CancelledError):
            await caller

    asyncio.run(main())


def test_the_sync_flavour_hands_back_the_value() -> None:
    assert Settle.reply("reply") == "reply"
