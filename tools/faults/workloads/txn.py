"""The txn workload: `txn` operations of several sends and polls by a transactional producer and a
read_committed consumer; in subscribe mode the polled offsets are committed in the transaction
(consume-transform-produce). Checked for G0, G1a, G1b, G1c, G-single and G2 besides the log classes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftpy.tools.faults.workloads.clients import ClientSpec
from kraftpy.tools.faults.workloads.runner import Workers

if TYPE_CHECKING:
    from kraftpy.tools.faults.workloads import WorkloadContext

READ_COMMITTED = True


def make(ctx: WorkloadContext) -> Workers:
    spec = ClientSpec(ctx.bootstrap, ctx.topic, ctx.keys, ctx.sub_via, transactional=True, group_id="fw-txn")
    return Workers(ctx.history, spec, ctx.client, ctx.max_ops, ctx.rng, ctx.rate_per_s)
