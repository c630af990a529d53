"""KRaft consensus: a pure state machine (roles, elections, pull replication, commit, snapshots,
KIP-853 voter changes). No I/O: time comes in as an argument and randomness from an injected
`random.Random`; effects go out as data for the driver to perform.

The API
-------
`RaftNode(config=RaftConfig(...), node_id=, directory_id=, cluster_id=, log=RaftLog, persisted=
ElectionState | None, static_voters=VoterSet | None, rng=random.Random, now_ms=, local_endpoints=,
bootstrap_servers=)` is one replica. Call `poll(now_ms)` right after constructing it. It is driven
only through methods that take `now_ms` and return an `Output`:

- `handle_request(request, *, token, now_ms)`: an inbound kio request (Vote v2,
  BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v18, FetchSnapshot v1, DescribeQuorum v2,
  AddRaftVoter v1, RemoveRaftVoter v0, UpdateRaftVoter v0). Its response is an
  `OutboundResponse(token, response)` in this Output or a later one (a Fetch with nothing new is
  parked up to its max wait; AddRaftVoter answers after the commit).
- `handle_response(token, response | RequestFailure, *, now_ms)`: the outcome of an
  `OutboundRequest(token, destination_id, endpoints, request, timeout_ms)` the node sent. The node
  times requests out itself after `timeout_ms`; the driver may report failures earlier. A broken,
  reset, refused or unestablished connection is `RequestFailure.DISCONNECTED`, no answer on a
  working connection is `TIMED_OUT`: a voter whose leader connection breaks and whose immediate
  reconnect is refused starts pre-vote without waiting out the fetch timeout (`_maybe_fail_over`).
- `poll(now_ms)`: timers. Call it by `Output.next_deadline_ms`.
- `handle_log_flushed(flush, *, now_ms)`: the `LogFlush` of an earlier Output is done.
- `append(records, *, epoch, now_ms) -> last offset`: the state machine's write, bound to the
  leader epoch it believes in; raises `NotLeaderError` for any other epoch. The batch reaches the
  log after `append_linger_ms` on a later `poll` (`next_deadline_ms(now_ms)` says when).
- `prepare_append(records, *, epoch, now_ms) -> last offset` then `schedule_prepared_append()`:
  the same write in two steps (Kafka's prepareAppend / schedulePreparedAppend). Raft reserves the
  offsets and holds the batch back from the log until it is scheduled, so the quorum controller
  can apply the records exactly where they land before they may be replicated;
  `next_append_offset` is where the next batch would start. `prepare_appends(batches, ...)`
  reserves several batches in one call, all or none, released by one schedule.
- `resign(epoch, *, now_ms)`, `shutdown(timeout_ms, *, now_ms)` (`Output.shutdown_complete`).
- `create_snapshot(end_offset=, records=, last_contained_log_timestamp_ms=, now_ms=)`: freeze a
  snapshot at a committed offset (`kraft_engine.errors.SnapshotError` otherwise); retention then cleans the log prefix
  above `retention_max_bytes`, always keeping the latest snapshot.
- `upgrade_kraft_version(epoch, version, *, validate_only, now_ms)`: the kraft.version 0 -> 1
  upgrade the controller's UpdateFeatures calls (NotLeaderError / KRaftVersionUpgradeError).
- `voter_set_at(offset)`, `kraft_version_at(offset)`: the control-record history.
- Introspection: `role`, `epoch`, `leader_id`, `leader_and_epoch`, `voted_key`, `election_state`,
  `high_watermark`, `log_end_offset`, `voters`, `kraft_version`, `is_voter`, `state` (the role's
  state object; `LeaderState.voter_states` / `observer_states` hold per-replica progress).

The ordering contract (what the driver does with an Output, in this order)
--------------------------------------------------------------------------
1. `persist`: if set, write the quorum-state file durably (tmp, fsync, rename) BEFORE sending
   anything from this Output. It is set for every transition that changes the persisted
   (epoch, leader, vote) and never for Prospective or Resigned.
2. `flush`: the node mutates its `RaftLog` in place but never syncs it; `LogFlush` asks the
   driver to make the log durable below its `end_offset` and report that with
   `handle_log_flushed(flush, now_ms=)`. The driver may run it off its loop and in parallel
   with the messages (the leader's fsync overlaps replication). The leader counts its own end
   offset toward the high watermark, and a follower reports a fetch offset, only up to a
   completed flush, so a log that loses unflushed data on a crash is safe.
3. `messages`: send requests and responses, in list order.
4. `events`: hand to the state machine in order: `SnapshotLoad` (handleLoadSnapshot),
   `CommittedBatch` (handleCommit, only offsets below the high watermark), `LeaderChange`
   (handleLeaderChange; for a new local leader only once every record before its epoch start has
   been delivered). Listener delivery is through Output, not callbacks.
5. Call `poll` again no later than `next_deadline_ms`.

`MemoryLog` is the pure in-memory `RaftLog`; `QuorumState` is the only code that changes roles.
The node answers only the raft APIs at the versions above; the node process answers ApiVersions
(with the `kraft.version` supported feature, which AddRaftVoter checks) and routes the rest.
Bootstrap servers (`controller.quorum.bootstrap.servers`) appear as negative destination ids.
Each rule and the test that proves it: `docs/raft-rules.md`.
"""

from kraft_engine.raft.config import RaftConfig
from kraft_engine.raft.errors import (
    BufferFullError,
    KRaftVersionUpgradeError,
    NotLeaderError,
    RecordBatchTooLargeError,
)
from kraft_engine.raft.leader_state import LeaderState, ReplicaState
from kraft_engine.raft.log import BOOTSTRAP_SNAPSHOT_ID, MemoryLog, RaftLog
from kraft_engine.raft.node import RaftNode
from kraft_engine.raft.output import (
    CommittedBatch,
    LeaderAndEpoch,
    LeaderChange,
    ListenerEvent,
    LogFlush,
    OutboundRequest,
    OutboundResponse,
    Output,
    RequestFailure,
    SnapshotLoad,
)
from kraft_engine.raft.quorum_state import (
    CandidateState,
    ElectionState,
    FollowerState,
    ProspectiveState,
    QuorumState,
    ResignedState,
    UnattachedState,
)
from kraft_engine.raft.role import Role
from kraft_engine.raft.snapshot_builder import SnapshotBuilder
from kraft_engine.raft.voter_set import (
    KRAFT_VERSION_0,
    KRAFT_VERSION_1,
    Endpoint,
    ReplicaKey,
    VoterNode,
    VoterSet,
    parse_static_voters,
)

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "BufferFullError",
    "CandidateState",
    "CommittedBatch",
    "ElectionState",
    "Endpoint",
    "FollowerState",
    "KRAFT_VERSION_0",
    "KRAFT_VERSION_1",
    "KRaftVersionUpgradeError",
    "LeaderAndEpoch",
    "LeaderChange",
    "LeaderState",
    "ListenerEvent",
    "LogFlush",
    "MemoryLog",
    "NotLeaderError",
    "OutboundRequest",
    "OutboundResponse",
    "Output",
    "ProspectiveState",
    "QuorumState",
    "RaftConfig",
    "RaftLog",
    "RaftNode",
    "RecordBatchTooLargeError",
    "ReplicaKey",
    "ReplicaState",
    "RequestFailure",
    "ResignedState",
    "Role",
    "SnapshotBuilder",
    "SnapshotLoad",
    "UnattachedState",
    "VoterNode",
    "VoterSet",
    "parse_static_voters",
]
