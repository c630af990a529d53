"""`meta.properties`: Java properties syntax, Kafka's MetaProperties rules, and the ensemble check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft_engine.kafka_uuid import ONE_UUID, from_kafka_str, random_uuid
from kraft_engine.storage.java_properties import JavaPropertiesError, format_properties, parse_properties
from kraft_engine.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesEnsemble,
    MetaPropertiesError,
    initialize_new_log_dirs,
    read_meta_properties,
    write_meta_properties,
)

CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"


def test_parses_java_properties_syntax() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   version = 1\n"
        "cluster.id:abc\n"
        "node.id 7\n"
        "key\\ with\\ spaces=value with spaces  \n"
        "escaped\\=key=a\\tb\\u0041\\\\\n"
        "multi=first \\\n"
        "      second\r\n"
        "empty=\n"
        "bare\n"
    )
    assert parse_properties(text) == {
        "version": "1",
        "cluster.id": "abc",
        "node.id": "7",
        "key with spaces": "value with spaces  ",
        "escaped=key": "a\tbA\\",
        "multi": "first second",
        "empty": "",
        "bare": "",
    }


def test_bad_unicode_escape_is_an_error() -> None:
    with pytest.raises(JavaPropertiesError, match="uxxxx"):
        parse_properties("k=\\u12G4\n")


@given(
    st.dictionaries(
        st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=10),
        st.text(st.characters(blacklist_categories=("Cs",)), max_size=10),
        max_size=5,
    )
)
def test_format_then_parse_round_trips(entries: dict[str, str]) -> None:
    assert parse_properties(format_properties(entries, comments=("", "header"))) == entries


def test_write_produces_kafkas_layout_and_reads_back(tmp_path: Path) -> None:
    directory_id = random_uuid()
    meta = MetaProperties(version=1, cluster_id=CLUSTER, node_id=3, directory_id=directory_id)
    write_meta_properties(tmp_path, meta)
    lines = (tmp_path / "meta.properties").read_text().splitlines()
    assert lines[0] == "#"
    assert re.fullmatch(r"#\w{3} \w{3} \d{2} \d{2}:\d{2}:\d{2} UTC \d{4}", lines[1])
    assert sorted(lines[2:]) == sorted(
        ["version=1", f"cluster.id={CLUSTER}", "node.id=3", f"directory.id={meta.to_properties()['directory.id']}"]
    )
    assert read_meta_properties(tmp_path) == meta


def test_reads_a_kafka_written_file(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Thu Jan 04 10:00:00 UTC 2024\nnode.id=1\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\nversion=1\ncluster.id=abc\n"
    )
    assert read_meta_properties(tmp_path) == MetaProperties(
        version=1, cluster_id="abc", node_id=1, directory_id=from_kafka_str("J8aAPcfLQt2bqs1JT_rMgQ")
    )


def test_version_0_uses_broker_id(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text("broker.id=4\n")
    assert read_meta_properties(tmp_path) == MetaProperties(version=0, cluster_id=None, node_id=4)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("version=1\nnode.id=1\n", "cluster.id was not found"),
        ("version=1\ncluster.id=abc\n", "node.id"),
        ("version=1\ncluster.id=abc\nnode.id=one\n", "node.id"),
        ("version=2\ncluster.id=abc\nnode.id=1\n", "version"),
        ("version=1\ncluster.id=abc\nnode.id=1\ndirectory.id=nope\n", "directory.id"),
    ],
)
def test_invalid_files_are_errors_naming_the_path(tmp_path: Path, content: str, problem: str) -> None:
    (tmp_path / "meta.properties").write_text(content)
    with pytest.raises(MetaPropertiesError) as excinfo:
        read_meta_properties(tmp_path)
    assert problem in str(excinfo.value)
    assert str(tmp_path / "meta.properties") in str(excinfo.value)


def _formatted(path: Path, *, cluster_id: str = CLUSTER, node_id: int = 1, directory_id: object = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    write_meta_properties(
        path,
        MetaProperties(
            version=1,
            cluster_id=cluster_id,
            node_id=node_id,
            directory_id=random_uuid() if directory_id is None else directory_id,  # type: ignore[arg-type]
        ),
    )
    return path


def test_ensemble_sorts_directories_into_categories(tmp_path: Path) -> None:
    good = _formatted(tmp_path / "good")
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = tmp_path / "missing"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "meta.properties").write_text("version=1\n")
    ensemble = MetaPropertiesEnsemble.load([good, empty, missing, broken])
    assert set(ensemble.formatted) == {good}
    assert ensemble.empty == {empty}
    assert ensemble.missing == {missing}
    assert set(ensemble.errors) == {broken}
    assert ensemble.cluster_id == CLUSTER
    assert ensemble.node_id == 1
    ensemble.verify()  # an error dir alone is tolerated unless it is the metadata log dir


def test_ensemble_rejects_mismatched_cluster_ids_naming_the_directories(tmp_path: Path) -> None:
    a = _formatted(tmp_path / "a")
    b = _formatted(tmp_path / "b", cluster_id="OtherClusterIdAAAAAAAA")
    with pytest.raises(MetaPropertiesError) as excinfo:
        MetaPropertiesEnsemble.load([a, b]).verify()
    message = str(excinfo.value)
    assert "cluster.id" in message and str(a) in message and str(b) in message


def test_ensemble_rejects_mismatched_node_ids(tmp_path: Path) -> None:
    a = _formatted(tmp_path / "a", node_id=1)
    b = _formatted(tmp_path / "b", node_id=2)
    with pytest.raises(MetaPropertiesError, match=r"node\.id") as excinfo:
        MetaPropertiesEnsemble.load([a, b]).verify()
    assert str(b) in str(excinfo.value)


def test_ensemble_checks_expected_ids(tmp_path: Path) -> None:
    a = _formatted(tmp_path / "a", node_id=1)
    ensemble = MetaPropertiesEnsemble.load([a])
    ensemble.verify(expected_cluster_id=CLUSTER, expected_node_id=1)
    with pytest.raises(MetaPropertiesError, match="expected 2, but read 1"):
        ensemble.verify(expected_node_id=2)


def test_ensemble_rejects_duplicate_directory_ids(tmp_path: Path) -> None:
    shared = random_uuid()
    a = _formatted(tmp_path / "a", directory_id=shared)
    b = _formatted(tmp_path / "b", directory_id=shared)
    with pytest.raises(MetaPropertiesError, match=r"Duplicate directory\.id") as excinfo:
        MetaPropertiesEnsemble.load([a, b]).verify()
    assert str(a) in str(excinfo.value) and str(b) in str(excinfo.value)


def test_ensemble_rejects_reserved_directory_id(tmp_path: Path) -> None:
    a = _formatted(tmp_path / "a", directory_id=ONE_UUID)
    with pytest.raises(MetaPropertiesError, match="reserved"):
        MetaPropertiesEnsemble.load([a]).verify()


def test_ensemble_refuses_an_unreadable_metadata_log_dir(tmp_path: Path) -> None:
    good = _formatted(tmp_path / "good")
    meta_dir = tmp_path / "meta"
    meta_dir.mkdir()
    (meta_dir / "meta.properties").write_text("version=1\nnode.id=x\n")
    ensemble = MetaPropertiesEnsemble.load([good], metadata_log_dir=meta_dir)
    with pytest.raises(MetaPropertiesError, match="metadata log directory"):
        ensemble.verify()


def test_ensemble_flags(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    ensemble = MetaPropertiesEnsemble.load([empty])
    with pytest.raises(MetaPropertiesError, match=r"No readable meta\.properties"):
        ensemble.verify(require_at_least_one_valid=True)
    with pytest.raises(MetaPropertiesError, match="No metadata log directory"):
        ensemble.verify(require_metadata_log_dir=True)
    with pytest.raises(MetaPropertiesError, match="at least one log directory"):
        MetaPropertiesEnsemble.load([])


def test_a_log_dir_added_to_a_formatted_node_gets_its_identity_and_a_new_directory_id(tmp_path: Path) -> None:
    """Kafka's initializeLogDirs: an empty or missing log directory of a node whose metadata log
    directory is formatted gets that directory's cluster.id and node.id and a directory.id of its
    own; formatted directories are left alone."""
    metadata, old, empty, missing = (tmp_path / n for n in ("metadata", "data-0", "data-1", "data-2"))
    for d in (metadata, old, empty):
        d.mkdir()
    write_meta_properties(metadata, MetaProperties(1, CLUSTER, 4, random_uuid()))
    old_meta = MetaProperties(1, CLUSTER, 4, random_uuid())
    write_meta_properties(old, old_meta)
    before = (old / "meta.properties").read_bytes()
    ensemble = MetaPropertiesEnsemble.load([old, empty, missing], metadata_log_dir=metadata)
    written = initialize_new_log_dirs(ensemble)
    assert sorted(written) == [empty, missing]
    assert (old / "meta.properties").read_bytes() == before
    for d in (empty, missing):
        meta = read_meta_properties(d)
        assert (meta.cluster_id, meta.node_id, meta.directory_id) == (CLUSTER, 4, written[d])
    ids = {read_meta_properties(d).directory_id for d in (metadata, old, empty, missing)}
    assert len(ids) == 4
    MetaPropertiesEnsemble.load([old, empty, missing], metadata_log_dir=metadata).verify(
        expected_node_id=4, require_metadata_log_dir=True, require_at_least_one_valid=True)


def test_nothing_is_written_for_a_node_whose_metadata_log_dir_is_not_formatted(tmp_path: Path) -> None:
    metadata, data = tmp_path / "metadata", tmp_path / "data-1"
    metadata.mkdir()
    ensemble = MetaPropertiesEnsemble.load([data], metadata_log_dir=metadata)
    assert initialize_new_log_dirs(ensemble) == {}
    assert not data.exists()
