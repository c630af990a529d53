"""`.kafka_cleanshutdown`: the broker epoch a broker registers with as its previous one (KIP-966)."""

from __future__ import annotations

from pathlib import Path

from kraft_engine.server.replica_manager import CLEAN_SHUTDOWN_FILE_NAME, clean_shutdown_broker_epoch


def dirs(tmp_path: Path, *markers: str | None) -> list[Path]:
    found = []
    tmp_path.mkdir(exist_ok=True)
    for i, marker in enumerate(markers):
        directory = tmp_path / f"data-{i}"
        directory.mkdir()
        if marker is not None:
            (directory / CLEAN_SHUTDOWN_FILE_NAME).write_text(marker)
        found.append(directory)
    return found


def test_every_directory_marked_with_one_epoch_gives_that_epoch(tmp_path: Path) -> None:
    marker = '{"version":0,"brokerEpoch":42}'
    assert clean_shutdown_broker_epoch(dirs(tmp_path, marker, marker)) == 42


def test_a_directory_without_a_readable_marker_means_an_unclean_shutdown(tmp_path: Path) -> None:
    marker = '{"version":0,"brokerEpoch":42}'
    assert clean_shutdown_broker_epoch(dirs(tmp_path / "a", marker, None)) == -1
    assert clean_shutdown_broker_epoch(dirs(tmp_path / "b", marker, "{torn")) == -1
    assert clean_shutdown_broker_epoch(dirs(tmp_path / "c", marker, '{"version":0,"brokerEpoch":41}')) == -1
