"""The queue workload (Jepsen's kafka workload): single `send` and `poll` operations, then a drain."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftpy.tools.faults.workloads.clients import ClientSpec
from kraftpy.tools.faults.workloads.entry import Workload
from kraftpy.tools.faults.workloads.runner import Workers

if TYPE_CHECKING:
    from kraftpy.tools.faults.workloads.entry import WorkloadContext


def make(ctx: WorkloadContext) -> Workers:
    spec = ClientSpec(ctx.bootstrap, ctx.topic, ctx.keys, ctx.sub_via, transactional=False, group_id="fw-queue")
    return Workers(ctx.history, spec, ctx.client, ctx.max_ops, ctx.rng, ctx.rate_per_s)


# Allowed: only Jepsen's for subscribe (poll-skip, nonmonotonic-poll), which `kraftpy check` adds itself.
WORKLOAD = Workload(make=make)
