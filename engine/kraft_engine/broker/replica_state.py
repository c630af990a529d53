"""What a partition leader knows about its followers, and the ISR and high-watermark rules it
applies with that knowledge (Kafka's Partition / Replica state, without the log).

Kept pure so the rules can be tested exhaustively: the shell feeds it each follower Fetch (the
offset the follower asked for is its log end offset) and the leader's own log end, and asks:

- `high_watermark`: the smallest log end offset among the leader and every replica of the
  *maximal* ISR (the committed ISR plus a pending expansion; a pending shrink still counts the
  replica it removes, so a write is never acknowledged on the strength of an ISR the controller
  has not accepted). It never moves back. With KIP-966's ELR on, it does not move at all while
  the committed ISR is smaller than the effective min.insync.replicas (`min_isr_to_advance`), as
  Kafka's Partition.maybeIncrementLeaderHW: the ELR may only hold replicas that have every
  committed record, so a write below min ISR is not committed.
- `shrink_candidates`: ISR members that have not caught up to the leader's log end within
  `replica.lag.time.max.ms` (Kafka's lastCaughtUpTime rule: a fetch that reaches the leader's log
  end makes the follower caught up at that fetch's time; one that reaches the log end the leader
  had at the follower's previous fetch makes it caught up as of that previous fetch).
- `expand_candidates`: followers outside the ISR whose log end reached the high watermark and
  the start offset of the current leader epoch.

The ISR itself only changes when the controller accepts it (AlterPartition) and the committed
metadata says so: `propose` records one in-flight change, `committed` installs the new state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["FollowerState", "LeaderReplicaState"]


@dataclass(slots=True)
class FollowerState:
    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_log_end: int = -1

    def caught_up(self, *, leader_log_end: int, now_ms: int, lag_max_ms: int) -> bool:
        return self.log_end_offset >= leader_log_end or now_ms - self.last_caught_up_ms <= lag_max_ms


class LeaderReplicaState:
    """One led partition's followers, ISR and high watermark."""

    def __init__(
        self,
        *,
        local_id: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        partition_epoch: int,
        high_watermark: int,
        leader_epoch_start_offset: int,
        now_ms: int,
    ) -> None:
        self.local_id = local_id
        self.isr: frozenset[int] = frozenset(isr)
        self.partition_epoch = partition_epoch
        self.high_watermark = high_watermark
        self.leader_epoch_start_offset = leader_epoch_start_offset
        self.pending_isr: frozenset[int] | None = None
        self.min_isr_to_advance = 0
        """With ELR on, the effective min.insync.replicas (min of the topic's and its replication
        factor); 0 otherwise. The shell sets it before asking the high watermark to move."""
        # Kafka starts every follower as caught up at leadership time: a new leader must not
        # shrink the ISR before its followers had a chance to fetch.
        self.followers = {r: FollowerState(last_caught_up_ms=now_ms) for r in replicas if r != local_id}

    def set_replicas(self, replicas: Iterable[int], *, now_ms: int) -> None:
        wanted = {r for r in replicas if r != self.local_id}
        for gone in set(self.followers) - wanted:
            del self.followers[gone]
        for new in wanted - set(self.followers):
            self.followers[new] = FollowerState(last_caught_up_ms=now_ms)

    @property
    def maximal_isr(self) -> frozenset[int]:
        if self.pending_isr is None:
            return self.isr
        return self.isr | self.pending_isr

    # -- inputs --------------------------------------------------------------------------------------
    def follower_fetched(self, replica_id: int, *, fetch_offset: int, leader_log_end: int, now_ms: int) -> bool:
        """A follower's Fetch at `fetch_offset`; True when it changed the high watermark."""
        follower = self.followers.get(replica_id)
        if follower is None:
            return False
        if fetch_offset >= leader_log_end:
            follower.last_caught_up_ms = now_ms
        elif fetch_offset >= follower.last_fetch_leader_log_end >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_ms = now_ms
        follower.last_fetch_leader_log_end = leader_log_end
        return self.maybe_advance_high_watermark(leader_log_end=leader_log_end)

    def maybe_advance_high_watermark(self, *, leader_log_end: int) -> bool:
        if len(self.isr) < self.min_isr_to_advance:
            return False
        candidate = leader_log_end
        maximal = self.maximal_isr
        for replica_id, follower in self.followers.items():
            if replica_id in maximal:
                candidate = min(candidate, max(follower.log_end_offset, 0))
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    # -- ISR changes ---------------------------------------------------------------------------------
    def shrink_candidates(self, *, leader_log_end: int, now_ms: int, lag_max_ms: int) -> frozenset[int]:
        return frozenset(
            r for r in self.isr
            if r != self.local_id
            and r in self.followers
            and not self.followers[r].caught_up(leader_log_end=leader_log_end, now_ms=now_ms, lag_max_ms=lag_max_ms)
        )

    def expand_candidates(self, *, eligible: frozenset[int] | None = None) -> frozenset[int]:
        return frozenset(
            r for r, f in self.followers.items()
            if r not in self.isr
            and (eligible is None or r in eligible)
            and f.log_end_offset >= self.high_watermark
            and f.log_end_offset >= self.leader_epoch_start_offset
        )

    def propose(self, new_isr: frozenset[int]) -> None:
        """An AlterPartition is in flight; an expansion counts for the high watermark at once."""
        self.pending_isr = new_isr

    def proposal_failed(self) -> None:
        self.pending_isr = None

    def committed(self, *, isr: Iterable[int], partition_epoch: int) -> None:
        """The controller's (or the metadata's) state for this partition; stale ones are ignored."""
        if partition_epoch < self.partition_epoch:
            return
        self.isr = frozenset(isr)
        self.partition_epoch = partition_epoch
        self.pending_isr = None
