"""Cluster health as a pure function of pids and /admin/status answers."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from rich.console import Console

from kraftpy.tools.commands.cluster import evaluate_health, new_layout, render_health, rpc_cell

LAYOUT = new_layout(Path("/tmp/none"), 3, "127.0.0.1", 9092)
CID = LAYOUT.cluster_id


def answer(node_id: int, leader_id: int | None, epoch: int = 3, *, active: bool = False, fenced=None) -> dict:
    status = {"cluster_id": CID, "raft": {"leader_id": leader_id, "epoch": epoch}, "broker": {"fenced": False}}
    if active:
        status["controller"] = {"active": True, "fenced_brokers": fenced or {}}
    return status


def test_healthy_when_all_agree_and_no_broker_fenced() -> None:
    health = evaluate_health(
        LAYOUT, {1: 11, 2: 12, 3: 13}, {1: answer(1, 2), 2: answer(2, 2, active=True), 3: answer(3, 2)}
    )
    assert health.healthy, health.problems
    assert health.leader_id == 2 and health.epoch == 3
    assert health.to_json()["nodes"][0] == {
        "node_id": 1,
        "pid": 11,
        "alive": True,
        "roles": ["broker", "controller"],
        "address": "127.0.0.1:9092",
        "kafka_listeners": [],
        "fenced": False,
    }


def test_each_broker_shows_its_kafka_listener_as_reported_else_as_laid_out() -> None:
    layout = new_layout(Path("/tmp/none"), 3, "127.0.0.1", 19092, kafka_base_port=9092)
    statuses = {n: {**answer(n, 1, active=n == 1), "cluster_id": layout.cluster_id} for n in (1, 2, 3)}
    statuses[2]["broker"] = {"fenced": False, "kafka": {"listeners": ["PLAINTEXT://127.0.0.1:29093"]}}
    statuses[3] = None
    health = evaluate_health(layout, {1: 1, 2: 2, 3: 3}, statuses)
    assert [n["kafka_listeners"] for n in health.to_json()["nodes"]] == [
        ["PLAINTEXT://127.0.0.1:9092"],
        ["PLAINTEXT://127.0.0.1:29093"],
        ["PLAINTEXT://127.0.0.1:9094"],
    ]
    console = Console(width=200, record=True)
    console.print(render_health(health))
    text = console.export_text()
    assert "kafka" in text and "rpc" in text
    assert "127.0.0.1:29093" in text and "19093" in text
    # The RPC column gives the port alone when the Kafka column shows the host: the table fits 80 columns.
    narrow = Console(width=80, record=True)
    narrow.print(render_health(health))
    rows = [line.split() for line in narrow.export_text().splitlines() if line.split()[:1] in (["1"], ["2"], ["3"])]
    assert [row[4:6] for row in rows] == [
        ["127.0.0.1:9092", "19092"],
        ["127.0.0.1:29093", "19093"],
        ["127.0.0.1:9094", "19094"],
    ]


def test_the_rpc_column_keeps_its_host_when_the_kafka_listener_has_another() -> None:
    assert rpc_cell("127.0.0.2:19092", ["127.0.0.2:9092"]) == "19092"
    assert rpc_cell("127.0.0.2:19092", ["10.0.0.2:9092"]) == "127.0.0.2:19092"
    assert rpc_cell("127.0.0.2:19092", []) == "127.0.0.2:19092"


def test_a_dead_node_or_silent_node_is_unhealthy() -> None:
    health = evaluate_health(LAYOUT, {1: 11, 2: None, 3: 13}, {1: answer(1, 1), 2: None, 3: None})
    assert not health.healthy
    assert "node 2 is not running" in health.problems
    assert "node 3 does not answer on 127.0.0.1:9094" in health.problems


def test_no_leader_and_split_views_are_unhealthy() -> None:
    none = evaluate_health(LAYOUT, {1: 1, 2: 2, 3: 3}, {1: answer(1, None), 2: answer(2, None), 3: answer(3, None)})
    assert "the controller quorum has no leader" in none.problems
    split = evaluate_health(LAYOUT, {1: 1, 2: 2, 3: 3}, {1: answer(1, 1, 4), 2: answer(2, 2, 5), 3: answer(3, 2, 5)})
    assert not split.healthy and split.leader_id == 2
    assert any("disagree" in p for p in split.problems)


def test_active_controller_view_of_fencing_wins() -> None:
    statuses = {1: answer(1, 1, active=True, fenced={"3": True}), 2: answer(2, 1), 3: answer(3, 1)}
    health = evaluate_health(LAYOUT, {1: 1, 2: 2, 3: 3}, statuses)
    assert not health.healthy
    assert "broker 3 is fenced" in health.problems


def test_answer_for_another_cluster_counts_as_no_answer() -> None:
    statuses = {1: answer(1, 1), 2: answer(2, 1), 3: {**answer(3, 1), "cluster_id": "other"}}
    health = evaluate_health(LAYOUT, {1: 1, 2: 2, 3: 3}, statuses)
    assert "node 3 answers for cluster other" in health.problems


def test_a_layout_loaded_from_a_relative_dir_names_the_same_absolute_paths(tmp_path, monkeypatch) -> None:
    # `cluster start` spawns nodes with absolute config paths; `stop`/`status` with the default
    # relative ./.kraftpy must find the same paths, or running nodes look dead (pid check by cmdline).
    from kraftpy.tools.cluster_layout import ClusterLayout

    created = new_layout(tmp_path / ".kraftpy", 3, "127.0.0.1", 9092)
    created.save()
    monkeypatch.chdir(tmp_path)
    loaded = ClusterLayout.load(Path(".kraftpy"))
    assert loaded.config_path(loaded.nodes[0]) == created.config_path(created.nodes[0])
    assert loaded.config_path(loaded.nodes[0]).is_absolute()


def test_overlapping_rpc_and_kafka_port_runs_are_refused() -> None:
    with pytest.raises(click.BadParameter, match="overlap"):
        new_layout(Path("/tmp/none"), 3, "127.0.0.1", 9092, kafka_base_port=9094)
    per_node_hosts = new_layout(Path("/tmp/none"), 3, "127.0.0.2,127.0.0.3,127.0.0.4", 9092, kafka_base_port=9093)
    assert [n.kafka_port for n in per_node_hosts.nodes] == [9093, 9094, 9095]  # other hosts: no clash


def test_new_layout_takes_one_namespace_per_node_or_none() -> None:
    plain = new_layout(Path("/tmp/none"), 3, "127.0.0.1", 19092)
    assert [n.netns for n in plain.nodes] == ["", "", ""]
    inside = new_layout(Path("/tmp/none"), 3, "10.0.0.11,10.0.0.12,10.0.0.13", 19092, netns="a,b,c")
    assert [(n.host, n.netns) for n in inside.nodes] == [("10.0.0.11", "a"), ("10.0.0.12", "b"), ("10.0.0.13", "c")]
    with pytest.raises(click.BadParameter, match="namespace per node"):
        new_layout(Path("/tmp/none"), 3, "127.0.0.1", 19092, netns="a,b")
