"""A node refuses storage it must not use, and bad bytes on one connection cost nobody else anything."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest
from quorum_processes import HOST, ProcessCluster, describe_status, start_refused

pytestmark = pytest.mark.process


def _start_and_expect_refusal(config: Path) -> str:
    return start_refused(config)


def test_unformatted_storage_is_refused(cluster: ProcessCluster) -> None:
    node = cluster.add_node(1)
    stderr = _start_and_expect_refusal(node.config_path)
    assert "Error: No meta.properties found in" in stderr and "kraft storage format" in stderr


def test_a_node_id_that_differs_from_the_formatted_one_is_refused(cluster: ProcessCluster) -> None:
    node = cluster.add_node(1)
    cluster.format(1, "--standalone")
    meta = (node.data_dir / "meta.properties").read_text()
    node.config_path.write_text(node.config_path.read_text().replace("node.id=1", "node.id=7"))
    stderr = _start_and_expect_refusal(node.config_path)
    assert "Invalid node.id" in stderr and "expected 7, but read 1" in stderr
    assert str(node.data_dir / "meta.properties") in stderr and "move the foreign directory away" in stderr
    assert (node.data_dir / "meta.properties").read_text() == meta


def test_log_directories_of_different_clusters_are_refused(cluster: ProcessCluster) -> None:
    node = cluster.add_node(1)
    extra_dir = node.data_dir.parent / "data-2"
    node.config_path.write_text(
        node.config_path.read_text().replace(f"log.dirs={node.data_dir}", f"log.dirs={node.data_dir},{extra_dir}")
    )
    cluster.format(1, "--standalone")
    meta_path = extra_dir / "meta.properties"
    text = meta_path.read_text()
    other_cluster = cluster.random_uuid()
    meta_path.write_text(text.replace(f"cluster.id={cluster.cluster_id}", f"cluster.id={other_cluster}"))
    stderr = _start_and_expect_refusal(node.config_path)
    assert "disagree on cluster.id" in stderr and str(meta_path) in stderr
    assert other_cluster in meta_path.read_text()


def _send_and_wait_for_close(address: tuple[str, int], data: bytes, *, close_write: bool = False) -> None:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(data)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        # The node closes this one connection: recv returns b"" (or the peer resets it).
        try:
            while sock.recv(4096):
                pass
        except ConnectionResetError:
            pass


def test_malformed_frames_close_only_their_connection(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader()
    before = describe_status(cluster, bootstrap_ids=[leader])
    address = (HOST, cluster.nodes[leader].port)
    with socket.create_connection(address, timeout=10) as idle_neighbour:
        # Garbage: a 16-byte frame whose header names no api.
        _send_and_wait_for_close(address, struct.pack(">i", 16) + b"\xff" * 16)
        # A truncated frame: 100 bytes announced, 10 sent, then the client stops writing.
        _send_and_wait_for_close(address, struct.pack(">i", 100) + b"\x00" * 10, close_write=True)
        # 2 GiB declared: refused from the size prefix alone, before any body is read.
        _send_and_wait_for_close(address, struct.pack(">i", 2**31 - 1))
        # Meanwhile the node keeps answering DescribeQuorum on other connections.
        after = describe_status(cluster, bootstrap_ids=[leader])
        assert after["leaderId"] == before["leaderId"] == leader
        assert after["leaderEpoch"] == before["leaderEpoch"]
        idle_neighbour.sendall(b"")  # the untouched connection is still open
    cluster.append(["still-committing"])
    process = cluster.nodes[leader].process
    assert process is not None and process.poll() is None
