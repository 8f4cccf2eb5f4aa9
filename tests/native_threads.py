"""The librdkafka clients a test module leaves running, found when the module ends.

A confluent-kafka client that is never destroyed keeps librdkafka's threads alive after its test:
they retry the brokers of a cluster long stopped, opening and closing sockets once a second, in a
process whose later tests assume they are alone in it. The descriptor-stall test saw exactly that
(session 25): a leaked producer's sockets freed descriptors for a moment, the Raft vote file was
written in the gap, and the stall the test waits for never came. tests/conftest.py reports such
clients as an error of the module that left them; tests/unit/test_native_thread_rule.py tests it.
"""

from __future__ import annotations

import gc
import os

# librdkafka names its threads (rdk:broker1, rdk:bg, ...) and renames broker threads as it learns
# node ids; each client has exactly one main thread, whatever its brokers do.
LIBRDKAFKA_MAIN_THREAD = "rdk:main"


def librdkafka_clients() -> int:
    """How many librdkafka clients run in this process: their main threads, as /proc names them."""
    count = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                count += comm.read().strip() == LIBRDKAFKA_MAIN_THREAD
        except OSError:  # the thread ended while we looked
            continue
    return count


def librdkafka_clients_still_running() -> int:
    """The librdkafka clients still running once unreachable objects are collected (a client in a
    reference cycle is destroyed only by the cyclic collector)."""
    if not librdkafka_clients():
        return 0
    gc.collect()
    return librdkafka_clients()
