"""A real broker's restart kinds (KIP-966's previous broker epoch, broker/clean_restart.py), from its status.

One 3-node local cluster; node 3 reads its boot id from a file the test owns, as in a fault run. A
SIGKILL with the same boot id is clean (the page cache kept every write): the node registers with its
last broker epoch. A new boot id (a power loss) is unclean: -1. A graceful stop after which every log
was flushed is clean whatever the boot id.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cluster_support import LocalCluster, wait_for

pytestmark = pytest.mark.slow
NODE = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("clean-restart") / "cluster") as c:
        yield c


def broker_status(cluster: LocalCluster) -> dict[str, Any]:
    def registered() -> dict[str, Any] | None:
        status = cluster.status(NODE)
        return status["broker"] if status is not None and status["broker"]["registered"] else None

    return wait_for(f"node {NODE} to register", registered)


def restart(cluster: LocalCluster, sig: signal.Signals, boot_id_path: Path, new_boot: bool) -> dict[str, Any]:
    """Stop node 3 with `sig`, maybe give it a new boot id, start it; its broker status once registered."""
    before = broker_status(cluster)["broker_epoch"]
    cluster.kill(NODE, sig)
    if new_boot:
        boot_id_path.write_text(f"{uuid.uuid4()}\n")
    cluster.start()
    after = broker_status(cluster)
    assert after["broker_epoch"] > before
    return {**after["restart"], "epoch_before": before}


def test_kill_reboot_and_graceful_stop(cluster: LocalCluster) -> None:
    assert broker_status(cluster)["restart"] == {"previous_broker_epoch": -1, "clean": False, "reason": "no record"}
    layout = cluster.layout()
    entry = next(n for n in layout.nodes if n.node_id == NODE)
    boot_id_path = layout.node_dir(entry) / "boot_id"
    boot_id_path.write_text(f"{uuid.uuid4()}\n")
    cluster.write_setting("boot_id_path", f'"{boot_id_path}"', node_ids=(NODE,))

    # The first start on the test's boot id file: the recorded boot id was the kernel's.
    moved = restart(cluster, signal.SIGKILL, boot_id_path, new_boot=False)
    assert (moved["previous_broker_epoch"], moved["clean"], moved["reason"]) == (-1, False, "boot id changed")

    killed = restart(cluster, signal.SIGKILL, boot_id_path, new_boot=False)
    assert killed["reason"] == "same boot id" and killed["clean"] is True
    assert killed["previous_broker_epoch"] == killed["epoch_before"]

    power_loss = restart(cluster, signal.SIGKILL, boot_id_path, new_boot=True)
    assert (power_loss["previous_broker_epoch"], power_loss["clean"], power_loss["reason"]) == (
        -1,
        False,
        "boot id changed",
    )

    # Stopped gracefully after a start on durable logs: every log flushed, so a reboot loses nothing.
    graceful = restart(cluster, signal.SIGTERM, boot_id_path, new_boot=True)
    assert graceful["reason"] == "clean shutdown" and graceful["clean"] is True
    assert graceful["previous_broker_epoch"] == graceful["epoch_before"]
    log = cluster.log_text(NODE)
    assert f"broker {NODE} restart: clean, registering with previous broker epoch" in log
