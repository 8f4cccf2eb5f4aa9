"""A listener's budget for the bytes of large answers (protocol/shell/answer_budget.py)."""

from __future__ import annotations

import asyncio

from kraftpy.protocol.shell.answer_budget import AnswerBudget


def test_a_grant_is_what_is_free_plus_what_the_answer_already_held() -> None:
    budget = AnswerBudget(1000)
    first, second = budget.allowance(), budget.allowance()
    assert first.grant(600) == 600
    assert second.grant(600) == 400  # what is left
    assert budget.free_bytes == 0
    assert second.grant(600) == 400  # its own holding counts back in; nothing more is free
    first.hold(100)  # its answer turned out smaller
    assert second.grant(600) == 600
    assert budget.held_bytes == 700


def test_holding_past_the_limit_is_counted_and_grants_nothing_until_given_back() -> None:
    budget = AnswerBudget(1000)
    big, other = budget.allowance(), budget.allowance()
    big.grant(1)
    big.hold(1500)  # a granted fetch's one whole batch, however large
    assert budget.held_bytes == budget.peak_bytes == 1500
    assert other.grant(10) == 0
    big.hold(0)
    assert budget.held_bytes == 0 and budget.peak_bytes == 1500
    assert other.grant(10) == 10


def test_grants_are_never_negative() -> None:
    budget = AnswerBudget(1000)
    assert budget.allowance().grant(-5) == 0
    assert budget.held_bytes == 0


async def test_a_waiter_wakes_when_an_answer_is_given_back_and_times_out_otherwise() -> None:
    budget = AnswerBudget(1000)
    holder, waiter = budget.allowance(), budget.allowance()
    holder.hold(1000)
    assert await waiter.wait_for_room(50) is False
    waiting = asyncio.create_task(waiter.wait_for_room(60_000))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    holder.hold(999)
    assert await asyncio.wait_for(waiting, 5) is True
    assert await waiter.wait_for_room(0) is True  # room now: no wait
