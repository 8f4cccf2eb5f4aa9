"""The txn workload: `txn` operations of several sends and polls by a transactional producer and a
read_committed consumer; in subscribe mode the polled offsets are committed in the transaction
(consume-transform-produce). Checked for G0, G1a, G1b, G1c, G-single and G2 besides the log classes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftpy.tools.faults.workloads.clients import ClientSpec
from kraftpy.tools.faults.workloads.entry import Workload
from kraftpy.tools.faults.workloads.runner import Workers

if TYPE_CHECKING:
    from kraftpy.tools.faults.workloads.entry import WorkloadContext

# Reported, not failing the run: Kafka's transactions give read_committed (no aborted read, G1a), not
# serializability. A transaction's records enter the log when sent, not when committed, so the version
# order (ww) is log order and cycles through it (G0, G1c, G-single, G2) are Kafka's model (Jepsen allows
# G0 for Kafka); a poll may stop inside a committed transaction's writes (fetch limits), a G1b.
ALLOWED = ("G0", "G1b", "G1c", "G-single", "G2")


def make(ctx: WorkloadContext) -> Workers:
    spec = ClientSpec(ctx.bootstrap, ctx.topic, ctx.keys, ctx.sub_via, transactional=True, group_id="fw-txn")
    return Workers(ctx.history, spec, ctx.client, ctx.max_ops, ctx.rng, ctx.rate_per_s)


WORKLOAD = Workload(make=make, read_committed=True, allowed=ALLOWED)
