"""DescribeTopicPartitions (KIP-966), the API `kafka-topics --describe` of Kafka 4.x asks first.

Metadata has no place for the eligible leader replicas (ELR) and the last known ELR, and a topic of
many thousand partitions makes one Metadata answer huge; so Kafka 4.x's admin client describes
topics with DescribeTopicPartitions, page by page, and shows `Elr:` and `LastKnownElr:` per
partition. The answer comes from this broker's metadata image, as Kafka's KRaftMetadataCache
gives it:

- Topics sorted by name; none named means every topic. Those sorting before the cursor's topic are
  left out, and the cursor's topic starts at the cursor's partition. Naming topics without the
  cursor's topic among them is INVALID_REQUEST, the request's only error.
- At most min(`response_partition_limit`, `max.request.partition.size.limit`) partitions: a topic
  cut short, or a page that ends where another topic begins, sets `next_cursor` to where the next
  page starts; the last page has none.
- An unknown topic is UNKNOWN_TOPIC_OR_PARTITION with the zero topic id (left out when every topic
  was asked for). A partition whose leader is not an unfenced broker with an endpoint on this
  listener is LEADER_NOT_AVAILABLE; replicas that are not are its offline replicas.
- DESCRIBE on each topic, as Kafka's DescribeTopicPartitionsRequestHandler checks it: asking for
  every topic leaves the others out; a topic named without it is TOPIC_AUTHORIZATION_FAILED with
  the zero id (whether it exists or not), listed after the others. Every other topic carries its
  `topic_authorized_operations` (Kafka fills them always; the request has no flag for it).
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from kraft_engine.metadata import MetadataImage
from kraft_engine.metadata.authorizer import AclOperation, ResourceType
from kraft_engine.protocol import RequestContext
from kraft_engine.server.authorization import NodeAuthorizer

__all__ = ["DESCRIBE_TOPIC_PARTITIONS", "describe_topic_partitions", "refused_describe_topic_partitions"]

DESCRIBE_TOPIC_PARTITIONS = 75
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
_NO_OPERATIONS = i32(-2147483648)


def refused_describe_topic_partitions(request: Any, ctx: RequestContext, *, message: str) -> Any:
    """Kafka's error response for an invalid request: every topic named, with INVALID_REQUEST."""
    module = ctx.response_schema
    return ctx.response_class(throttle_time=timedelta(0), next_cursor=None, topics=tuple(
        module.DescribeTopicPartitionsResponseTopic(error_code=ErrorCode.invalid_request, name=TopicName(str(t.name)),
                                                    topic_id=uuid.UUID(int=0), is_internal=False, partitions=(),
                                                    topic_authorized_operations=_NO_OPERATIONS)
        for t in request.topics))


def describe_topic_partitions(request: Any, ctx: RequestContext, *, image: MetadataImage, limit_max: int,
                              authorizer: NodeAuthorizer) -> Any:
    module = ctx.response_schema
    fetch_all = not request.topics
    cursor = request.cursor
    cursor_topic = "" if cursor is None else str(cursor.topic_name)
    if fetch_all:
        names = sorted(n for n in image.topics.topics_by_name if n >= cursor_topic)
    else:
        names = sorted({str(t.name) for t in request.topics if str(t.name) >= cursor_topic})
        if cursor is not None and cursor_topic not in names:
            return refused_describe_topic_partitions(
                request, ctx, message=f"DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
                                      f"{cursor_topic}")
    refused = [] if fetch_all else [n for n in names if not authorizer.authorize(ctx, AclOperation.DESCRIBE,
                                                                                 ResourceType.TOPIC, n)]
    names = [n for n in names if n not in refused and (not fetch_all or authorizer.authorize(
        ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, n))]
    first_partition = 0 if cursor is None else int(cursor.partition_index)
    remaining = max(0, min(limit_max, int(request.response_partition_limit)))
    alive = {b.id for b in image.cluster.brokers.values() if not b.fenced and b.listener(ctx.listener_name) is not None}
    topics = []
    next_cursor = None
    for position, name in enumerate(names):
        topic_image = image.topics.get_topic_by_name(name)
        if topic_image is None:
            if not fetch_all:
                topics.append(module.DescribeTopicPartitionsResponseTopic(
                    error_code=ErrorCode.unknown_topic_or_partition, name=TopicName(name), topic_id=uuid.UUID(int=0),
                    is_internal=False, partitions=(), topic_authorized_operations=_NO_OPERATIONS))
            continue
        start = first_partition if name == cursor_topic else 0
        indexes = [i for i in sorted(topic_image.partitions) if i >= start]
        if remaining == 0:
            next_cursor = module.Cursor(topic_name=TopicName(name), partition_index=i32(indexes[0] if indexes else 0))
            break
        shown, rest = indexes[:remaining], indexes[remaining:]
        remaining -= len(shown)
        partitions = tuple(_partition(module, topic_image.partitions[i], index=i, alive=alive) for i in shown)
        topics.append(module.DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.none, name=TopicName(name), topic_id=topic_image.id, is_internal=name in _INTERNAL_TOPICS,
            partitions=partitions, topic_authorized_operations=_NO_OPERATIONS))
        if rest:
            next_cursor = module.Cursor(topic_name=TopicName(name), partition_index=i32(rest[0]))
            break
        if remaining == 0 and position + 1 < len(names):
            next_cursor = module.Cursor(topic_name=TopicName(names[position + 1]), partition_index=i32(0))
            break
    topics = [dataclasses.replace(t, topic_authorized_operations=i32(authorizer.authorized_operations(
        ctx, ResourceType.TOPIC, str(t.name)))) for t in topics]
    topics.extend(module.DescribeTopicPartitionsResponseTopic(
        error_code=ErrorCode.topic_authorization_failed, name=TopicName(name), topic_id=uuid.UUID(int=0),
        is_internal=False, partitions=(), topic_authorized_operations=_NO_OPERATIONS) for name in refused)
    return ctx.response_class(throttle_time=timedelta(0), topics=tuple(topics), next_cursor=next_cursor)


def _partition(module: Any, registration: Any, *, index: int, alive: set[int]) -> Any:
    leader = registration.leader
    return module.DescribeTopicPartitionsResponsePartition(
        error_code=ErrorCode.none if leader >= 0 and leader in alive else ErrorCode.leader_not_available,
        partition_index=i32(index),
        leader_id=BrokerId(leader),
        leader_epoch=i32(registration.leader_epoch),
        replica_nodes=tuple(BrokerId(r) for r in registration.replicas),
        isr_nodes=tuple(BrokerId(r) for r in registration.isr),
        eligible_leader_replicas=tuple(BrokerId(r) for r in registration.elr),
        last_known_elr=tuple(BrokerId(r) for r in registration.last_known_elr),
        offline_replicas=tuple(BrokerId(r) for r in registration.replicas if r not in alive),
    )

