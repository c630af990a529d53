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
"""

from kraft_engine.storage.atomic_file import atomic_replace, fsync_dir
from kraft_engine.storage.checkpoint_file import CheckpointError
from kraft_engine.storage.leader_epoch_cache import LeaderEpochCache
from kraft_engine.storage.meta_properties import (
    MetaProperties,
    MetaPropertiesEnsemble,
    MetaPropertiesError,
    read_meta_properties,
    write_meta_properties,
)
from kraft_engine.storage.quorum_state_store import FileQuorumStateStore, QuorumStateData, QuorumStateError

__all__ = [
    "CheckpointError",
    "FileQuorumStateStore",
    "LeaderEpochCache",
    "MetaProperties",
    "MetaPropertiesEnsemble",
    "MetaPropertiesError",
    "QuorumStateData",
    "QuorumStateError",
    "atomic_replace",
    "fsync_dir",
    "read_meta_properties",
    "write_meta_properties",
]
