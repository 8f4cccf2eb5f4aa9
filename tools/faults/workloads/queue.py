"""The queue workload (Jepsen's kafka workload): single `send` and `poll` operations, then a drain."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftpy.tools.faults.workloads.clients import ClientSpec
from kraftpy.tools.faults.workloads.runner import Workers

if TYPE_CHECKING:
    from kraftpy.tools.faults.workloads import WorkloadContext

READ_COMMITTED = False
ALLOWED: tuple[str, ...] = ()  # besides Jepsen's for subscribe (poll-skip, nonmonotonic-poll)


def make(ctx: WorkloadContext) -> Workers:
    spec = ClientSpec(ctx.bootstrap, ctx.topic, ctx.keys, ctx.sub_via, transactional=False, group_id="fw-queue")
    return Workers(ctx.history, spec, ctx.client, ctx.max_ops, ctx.rng, ctx.rate_per_s)
