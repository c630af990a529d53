"""Producing and fetching records over Kafka's protocol: what `kraft console-producer` and
`kraft console-consumer` need, against our brokers or Apache Kafka's.

A partition's requests go to its leader, found with Metadata on any bootstrap broker; an answer
that says the leader moved (NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH,
LEADER_NOT_AVAILABLE) or a broker that cannot be reached refreshes the metadata and retries until
the timeout, as Kafka's clients do.

The producer is idempotent as Kafka's is by default (acks=all): a producer id from
InitProducerId, a sequence number per partition, and a batch that failed with a retriable error
resent with the same sequence, so the leader drops it if the first attempt was written after all.
Unkeyed records go to one partition per send (Kafka's sticky partitioning); keyed records to
murmur2(key) mod the partition count, Kafka's built-in partitioner, so a key lands where a Java
client would put it. Consumers read a partition from an offset with sessionless Fetch (v12, no
group: groups come later).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import BrokerId, ProducerId, TopicName
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from kraft_engine.admin.broker_admin import BrokerAdmin
from kraft_engine.errors import AdminError
from kraft_engine.protocol import KafkaProtocolError
from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.records.client_records import (
    ClientRecord,
    ProducedRecord,
    encode_client_batch,
    read_client_records,
)

__all__ = ["EARLIEST", "LATEST", "PartitionLeader", "RecordClient", "RecordClientError", "murmur2_partition"]

EARLIEST, LATEST = -2, -1
_RETRY_INTERVAL_S = 0.1
_MOVED = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
    ErrorCode.leader_not_available, ErrorCode.request_timed_out, ErrorCode.not_enough_replicas,
    ErrorCode.not_enough_replicas_after_append, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
})
"""Errors after which the same request is worth sending again (after a metadata refresh)."""


class RecordClientError(AdminError):
    """A refusal to report: the error name and the broker's message."""

    def __init__(self, error: ErrorCode | str, message: str | None = None) -> None:
        name = error if isinstance(error, str) else error.name.upper()
        super().__init__(f"{name}: {message}" if message else name)
        self.error = error


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    leader_id: int
    leader_epoch: int
    address: tuple[str, int] | None


def murmur2_partition(key: bytes, partitions: int) -> int:
    """Kafka's built-in partitioner for a keyed record: toPositive(murmur2(key)) % partitions."""
    return (_murmur2(key) & 0x7FFFFFFF) % partitions


def _murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (seed 0x9747b28c), as a signed 32-bit result."""
    length = len(data)
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


class RecordClient(BrokerAdmin):
    """A topic's partition leaders from Metadata, and requests sent to them with retries."""

    def __init__(self, bootstrap: Sequence[tuple[str, int]], *, timeout_ms: int = 30000,
                 client_id: str = "kraft-console", security: ClientSecurity | None = None) -> None:
        super().__init__(bootstrap, timeout_ms=timeout_ms, client_id=client_id, security=security)
        self._leaders: dict[tuple[str, int], PartitionLeader] = {}
        self._partition_counts: dict[str, int] = {}
        self._producer: tuple[int, int] | None = None
        self._sequences: dict[tuple[str, int], int] = {}
        self._sticky = itertools.count()

    async def refresh(self, topic: str) -> int:
        """Load the topic's partition leaders; return its partition count. Unknown topic: error."""
        response = await self.send_to_any(MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        addresses = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        [answer] = response.topics
        code = ErrorCode(answer.error_code)
        if code != ErrorCode.none:
            raise RecordClientError(code, f"topic {topic}")
        for p in answer.partitions:
            leader = int(p.leader_id)
            self._leaders[(topic, int(p.partition_index))] = PartitionLeader(
                leader_id=leader, leader_epoch=int(p.leader_epoch), address=addresses.get(leader))
        self._partition_counts[topic] = len(answer.partitions)
        return len(answer.partitions)

    async def partition_count(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        return count if count is not None else await self.refresh(topic)

    async def _to_leader(self, topic: str, partition: int, build: Any, answer_of: Any) -> Any:
        """`build(leader)` sent to the partition's leader until `answer_of(response)` is not a
        moved-leader error; returns that answer. With `answer_of` None the request has no answer
        (Produce with acks=0): it is written once to a reachable leader and None returned."""
        deadline = self._deadline()
        last: str = "no leader"
        while True:
            leader = self._leaders.get((topic, partition))
            if leader is None or leader.address is None:
                await self.refresh(topic)
                leader = self._leaders.get((topic, partition))
                if leader is None:
                    raise RecordClientError(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition}")
            if leader.address is not None and answer_of is None:
                if await self._write_without_response(leader.address, build(leader)):
                    return None
                last = f"broker {leader.leader_id} unreachable"
            elif leader.address is not None:
                response = await self._send(leader.address, build(leader))
                if response is not None:
                    answer = answer_of(response)
                    if ErrorCode(answer.error_code) not in _MOVED:
                        return answer
                    last = ErrorCode(answer.error_code).name.upper()
                else:
                    last = f"broker {leader.leader_id} unreachable"
            self._leaders.pop((topic, partition), None)
            if asyncio.get_running_loop().time() >= deadline:
                raise RecordClientError("TIMEOUT", f"{topic}-{partition}: {last} for {self.timeout_ms} ms")
            await asyncio.sleep(_RETRY_INTERVAL_S)

    async def _write_without_response(self, address: tuple[str, int], request: Any) -> bool:
        """One request the broker answers with nothing; False when the broker cannot be reached."""
        connection = self._connection(address)
        try:
            await connection.send_without_response(request, timeout_ms=self._config.request_timeout_ms)
        except (KafkaProtocolError, OSError):
            with contextlib.suppress(Exception):
                await connection.disconnect()
            return False
        return True

    # -- consuming ----------------------------------------------------------------------------------
    async def list_offset(self, topic: str, partition: int, *, timestamp: int) -> int:
        """ListOffsets: EARLIEST, LATEST (the high watermark) or the first offset at a timestamp."""
        def build(leader: PartitionLeader) -> ListOffsetsRequest:
            return ListOffsetsRequest(replica_id=BrokerId(-1), isolation_level=i8(0), topics=(
                ListOffsetsTopic(name=TopicName(topic), partitions=(ListOffsetsPartition(
                    partition_index=i32(partition), current_leader_epoch=i32(leader.leader_epoch),
                    timestamp=i64(timestamp)),)),))

        answer = await self._to_leader(topic, partition, build, lambda r: r.topics[0].partitions[0])
        _raise_unless_none(answer)
        return int(answer.offset)

    async def fetch(self, topic: str, partition: int, *, offset: int, max_wait_ms: int,
                    max_bytes: int = 1 << 20) -> tuple[list[ClientRecord], int]:
        """The records from `offset` (up to the high watermark) and the high watermark."""
        def build(leader: PartitionLeader) -> FetchRequest:
            return FetchRequest(
                cluster_id=None, replica_id=BrokerId(-1),
                max_wait=i32Timedelta.parse(timedelta(milliseconds=max_wait_ms)), min_bytes=i32(1),
                max_bytes=i32(max_bytes), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
                topics=(FetchTopic(topic=TopicName(topic), partitions=(FetchPartition(
                    partition=i32(partition), current_leader_epoch=i32(leader.leader_epoch), fetch_offset=i64(offset),
                    last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(max_bytes)),)),),
                forgotten_topics_data=(), rack_id="")

        answer = await self._to_leader(topic, partition, build, lambda r: r.responses[0].partitions[0])
        _raise_unless_none(answer)
        records = [r for r in read_client_records(bytes(answer.records or b"")) if r.offset >= offset]
        return records, int(answer.high_watermark)

    # -- producing ----------------------------------------------------------------------------------
    async def init_producer(self) -> tuple[int, int]:
        """A producer id and epoch for idempotent writes (InitProducerId without a transactional id)."""
        deadline = self._deadline()
        while True:
            response = await self.send_to_any(InitProducerIdRequest(
                transactional_id=None, transaction_timeout=i32Timedelta.parse(timedelta(minutes=1)),
                producer_id=ProducerId(-1), producer_epoch=i16(-1)))
            code = ErrorCode(response.error_code)
            if code == ErrorCode.none:
                self._producer = (int(response.producer_id), int(response.producer_epoch))
                return self._producer
            if code not in _MOVED or asyncio.get_running_loop().time() >= deadline:
                raise RecordClientError(code, "InitProducerId")
            await asyncio.sleep(_RETRY_INTERVAL_S)

    async def partition_for(self, topic: str, key: bytes | None) -> int:
        count = await self.partition_count(topic)
        if key is None:
            return next(self._sticky) % count
        return murmur2_partition(key, count)

    async def produce(self, topic: str, partition: int, records: Sequence[ProducedRecord], *, acks: int,
                      codec: int, timeout_ms: int) -> int:
        """Write one batch; its base offset, or -1 with acks=0 (the broker answers nothing, so
        the offset and any refusal stay unknown, as Kafka's producer reports them). Idempotent
        when init_producer ran."""
        if acks not in (0, 1, -1):
            raise RecordClientError(ErrorCode.invalid_required_acks, f"acks={acks}: acks must be -1, 0 or 1")
        producer_id, epoch, sequence = -1, -1, -1
        if self._producer is not None:
            producer_id, epoch = self._producer
            sequence = self._sequences.get((topic, partition), 0)
        data = encode_client_batch(records, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                                   codec=codec)

        def build(_leader: PartitionLeader) -> ProduceRequest:
            return ProduceRequest(transactional_id=None, acks=i16(acks),
                                  timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)),
                                  topic_data=(TopicProduceData(name=TopicName(topic), partition_data=(
                                      PartitionProduceData(index=i32(partition), records=Records(data)),)),))

        if acks == 0:
            await self._to_leader(topic, partition, build, None)
            return -1
        answer = await self._to_leader(topic, partition, build, lambda r: r.responses[0].partition_responses[0])
        _raise_unless_none(answer)
        if self._producer is not None:
            self._sequences[(topic, partition)] = (sequence + len(records)) % (1 << 31)
        return int(answer.base_offset)


def _raise_unless_none(answer: Any) -> None:
    code = ErrorCode(answer.error_code)
    if code != ErrorCode.none:
        raise RecordClientError(code, getattr(answer, "error_message", None))

