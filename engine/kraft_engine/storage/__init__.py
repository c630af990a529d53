"""Kafka's on-disk formats: log segments and indexes, recovery, snapshots, `quorum-state`,
`meta.properties`, and the formatter.

Everything here reads and writes the same bytes Apache Kafka does, so a directory written by
one can be opened by the other and Kafka's own tools can inspect ours. Public API, by module:

- `atomic_file`: `atomic_replace(path, data)` (tmp + fsync + rename + dir fsync), `fsync_dir`.
- `quorum_state_store`: `FileQuorumStateStore(path).read() / .write(QuorumStateData) / .clear()`.
- `meta_properties`: `MetaProperties`, `read_meta_properties`, `write_meta_properties`,
  `MetaPropertiesEnsemble.load(dirs).verify(...)`.
- `checkpoint_file`: Kafka's `version / count / entries` checkpoint text files.
- `leader_epoch_cache`: `LeaderEpochCache` behind `leader-epoch-checkpoint`.
- `offset_index`: the sparse `.index` beside each segment.
- `partition_log`: `PartitionLog.open(dir, ...) -> (log, RecoveryReport)`; appends as leader or
  follower, reads, truncation, retention, flush (API in that module's docstring).
- `metadata_log`: `FileMetadataLog`, the raft core's `RaftLog` over a PartitionLog + snapshots.
- `log_file_reader`: read-only `list_log_files`, `read_log_file`, `scan_batches`, `read_batch_records`
  for tools that must not change what they read (dump-log, the pipeline).
- `storage_error`: `StorageIOError`, what every failed write, fsync or rename becomes.
- `snapshots`: `SnapshotWriter`, `DownloadedSnapshotWriter`, `SnapshotReader`, listing/deleting
  `<offset>-<epoch>.checkpoint` files.
"""

from kraft_engine.storage.atomic_file import atomic_replace, fsync_dir
from kraft_engine.storage.checkpoint_file import CheckpointError
from kraft_engine.storage.leader_epoch_cache import LeaderEpochCache
from kraft_engine.storage.log_file_reader import (
    BatchRecord,
    LogFileKind,
    LogFileName,
    ScannedBatch,
    ScanStop,
    classify_log_file,
    list_log_files,
    read_batch_records,
    read_log_file,
    scan_batches,
)
from kraft_engine.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesEnsemble,
    MetaPropertiesError,
    read_meta_properties,
    write_meta_properties,
)
from kraft_engine.storage.metadata_log import FileMetadataLog
from kraft_engine.storage.partition_log import (
    AppendInfo,
    DroppedBytes,
    LogError,
    OffsetOutOfRangeError,
    PartitionLog,
    RecoveryReport,
)
from kraft_engine.storage.quorum_state_store import FileQuorumStateStore, QuorumStateData, QuorumStateError
from kraft_engine.storage.snapshots import (
    DownloadedSnapshotWriter,
    SnapshotId,
    SnapshotReader,
    SnapshotWriter,
)
from kraft_engine.storage.storage_error import StorageIOError

__all__ = [
    "AppendInfo",
    "BatchRecord",
    "CheckpointError",
    "DownloadedSnapshotWriter",
    "DroppedBytes",
    "FileMetadataLog",
    "FileQuorumStateStore",
    "LeaderEpochCache",
    "LogFileKind",
    "LogFileName",
    "LogError",
    "MetaProperties",
    "MetaPropertiesEnsemble",
    "MetaPropertiesError",
    "OffsetOutOfRangeError",
    "PartitionLog",
    "QuorumStateData",
    "QuorumStateError",
    "RecoveryReport",
    "ScanStop",
    "ScannedBatch",
    "SnapshotId",
    "SnapshotReader",
    "SnapshotWriter",
    "StorageIOError",
    "atomic_replace",
    "classify_log_file",
    "fsync_dir",
    "list_log_files",
    "read_batch_records",
    "read_log_file",
    "read_meta_properties",
    "scan_batches",
    "write_meta_properties",
]
