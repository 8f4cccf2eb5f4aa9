"""Deliberately broken builds for fault runs (docs/jepsen.md): `KRAFTPY_TEST_BREAK`, set only by their tests.

A fault run that cannot fail proves nothing, so tests/jepsen_like starts brokers with one of these and
expects the same run to find anomalies. Read once from the environment by the broker's shell; the
cores see them only as config flags. Never set it on a real cluster: every broker logs a warning.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

ACK_BEFORE_HW = "ack-before-hw"  # acks=all answered at the leader's append
TRUNCATE_TO_HW = "truncate-to-hw"  # a new leader cuts its log to its checkpointed high watermark
COMMIT_ANY_GENERATION = "commit-any-generation"  # a group's coordinator stores any member's commit
STALE_READ = "stale-read"  # a register read skips the read index: any controller answers from its image
IGNORE_ABORTS = "read-committed-ignores-aborts"  # fetches tell read_committed consumers of no aborted txn
# An idempotent producer's retried batch (its answer lost, e.g. to a cut client) appended again, not
# answered with the original's offsets.
APPEND_DUPLICATES = "append-duplicates"
BREAKS = (ACK_BEFORE_HW, TRUNCATE_TO_HW, COMMIT_ANY_GENERATION, STALE_READ, IGNORE_ABORTS, APPEND_DUPLICATES)

TEST_BREAK = os.environ.get("KRAFTPY_TEST_BREAK", "")
if TEST_BREAK:
    log.warning("KRAFTPY_TEST_BREAK=%s: this broker is deliberately BROKEN (a fault-run test)", TEST_BREAK)
    if TEST_BREAK not in BREAKS:
        raise SystemExit(f"KRAFTPY_TEST_BREAK={TEST_BREAK!r}: not one of {', '.join(BREAKS)}")
