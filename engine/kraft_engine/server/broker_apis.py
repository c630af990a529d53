"""The client APIs a broker serves on its listeners (Kafka's KafkaApis for a KRaft broker).

Served (ApiVersions lists exactly these, each for every version in its range):

- Metadata v1-12: unfenced brokers with an endpoint on the listener the request came in on, topics
  with their ids, partitions with leader, leader epoch, replicas, ISR and offline replicas, read
  from this broker's published metadata image. An unknown topic asked for with
  allow_auto_topic_creation is created through the controller when `auto.create.topics.enable`
  (with `num.partitions` and `default.replication.factor`), and answered LEADER_NOT_AVAILABLE
  meanwhile, as Kafka does.
- Produce v3-13 (v13 names topics by id; v10+ answer NOT_LEADER_OR_FOLLOWER with the current
  leader and its endpoint): acks 0 (no response at all), 1 and -1 (all); batches validated by
  `broker.record_validation`; per-partition errors in the answer, never a closed connection.
  v11 and v12 change only transactional producers (KIP-890), which this broker refuses anyway
  (InitProducerId with a transactional id), so they are served as v10 is.
- Fetch v4-17 (v13+ name topics by id, v15+ carry the follower in ReplicaState), sessionless: the answer's session id is always 0, which Kafka clients read as
  "no session created" and keep sending full requests; a request naming a session id gets
  FETCH_SESSION_ID_NOT_FOUND. Followers (replica id >= 0) read up to the log end and get
  diverging-epoch answers; consumers read up to the high watermark. Long polls wait on the
  partitions' changes up to max_wait until min_bytes are there.
- ListOffsets v1-7: earliest (-2), latest (-1: the high watermark), max timestamp (-3) and by
  timestamp (the first offset whose record timestamp is at or after it; found by scanning the
  batch headers, there is no time index yet).
- OffsetsForLeaderEpoch v2-4, DescribeProducers v0, DescribeLogDirs v1-4: `server.replica_apis`.
- InitProducerId v0-5 for idempotent producers: ids from blocks the controller allocates
  (AllocateProducerIds); the leader's per-partition producer state (`broker.producer_state`)
  then drops duplicates and refuses sequence gaps and fenced epochs. No transactions.
- DescribeCluster v0-1 (broker endpoints), and, forwarded to the active controller in an Envelope
  (`server.forwarding`) at every version Kafka's controllers serve: CreateTopics v2-7, DeleteTopics
  v1-6, CreatePartitions v0-3, IncrementalAlterConfigs v0-1, AlterPartitionReassignments v0-1,
  ListPartitionReassignments v0, ElectLeaders v0-2.
- DescribeTopicPartitions v0 (KIP-966: ELR and last known ELR, paged with a cursor):
  `server.topic_describing`.
- DescribeConfigs v1-4, answered by this broker from its own config and metadata image, as Kafka's
  broker answers it (`server.config_describing`).
- DescribeClientQuotas v0-1 from the image's client quotas (`server.quota_describing`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, ProducerId, TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64
from prometheus_client import CollectorRegistry

from kraft_engine.broker import ProduceRefused, validate_produce_payload
from kraft_engine.broker.record_validation import parse_records, topic_codec
from kraft_engine.controller.config_schema import TOPIC_CONFIGS, resolve_topic_config
from kraft_engine.metadata import MetadataImage
from kraft_engine.metadata.authorizer import NOT_ASKED, AclOperation, ResourceType
from kraft_engine.metadata.configs_image import ConfigResource, ConfigResourceType
from kraft_engine.protocol import (
    NO_RESPONSE,
    EncodedResponse,
    FileRegion,
    Listener,
    RequestContext,
    SplicedResponse,
    make_entity,
)
from kraft_engine.records.batches import RECORD_BATCH_OVERHEAD, iter_batches
from kraft_engine.records.compression import CODEC_NONE, COMPRESSION_LEVELS, UnsupportedCodecError, decompress
from kraft_engine.server.authorization import CLUSTER_NAME, NodeAuthorizer, describe_acls
from kraft_engine.server.broker_topic_metrics import BrokerTopicMetrics
from kraft_engine.server.config_describing import BrokerConfigDescriber
from kraft_engine.server.controller_channel import ControllerChannel, ControllerUnavailable
from kraft_engine.server.forwarding import FORWARDED_API_VERSIONS, EnvelopeForwarder
from kraft_engine.server.quota_describing import DESCRIBE_CLIENT_QUOTAS, describe_client_quotas
from kraft_engine.server.replica_apis import ReplicaApis, leader_at_epoch
from kraft_engine.server.replica_manager import Partition, ReplicaManager, ReplicaReadError, quota_clock_ms
from kraft_engine.server.topic_describing import DESCRIBE_TOPIC_PARTITIONS, describe_topic_partitions
from kraft_engine.storage.partition_log import OffsetOutOfRangeError

__all__ = ["BrokerApis", "CLIENT_API_VERSIONS"]

logger = logging.getLogger(__name__)

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
INIT_PRODUCER_ID = 22
DESCRIBE_CLUSTER = 60
DESCRIBE_CONFIGS = 32
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
DESCRIBE_ACLS = 29
CLIENT_API_VERSIONS = {
    PRODUCE: (3, 13),
    FETCH: (4, 17),
    LIST_OFFSETS: (1, 10),  # Kafka 4.1's: v8 earliest-local (-4), v9 latest-tiered (-5), v10 a timeout
    METADATA: (1, 12),
    INIT_PRODUCER_ID: (0, 5),
    DESCRIBE_CLUSTER: (0, 2),  # v2: include_fenced_brokers (the operator sees a stopped broker still registered)
    DESCRIBE_CONFIGS: (1, 4),
    DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    DESCRIBE_ACLS: (1, 3),
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
}

# ListOffsets' special target timestamps (Kafka's ListOffsetsRequest); any other is a time to look up.
_EARLIEST, _LATEST, _MAX_TIMESTAMP, _EARLIEST_LOCAL, _LATEST_TIERED = -2, -1, -3, -4, -5
_SCAN_CHUNK_BYTES = 1024 * 1024
_NO_THROTTLE = timedelta(0)
# Distinct Metadata questions kept encoded per image: each client asks for all topics or for the
# few it uses, so a handful covers a cluster; the oldest goes first past this.
_METADATA_CACHE_ENTRIES = 256
_METADATA_ENCODE_OFF_LOOP_PARTITIONS = 10_000
_BROKER_ENDPOINT_TYPE = 1
_TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC


def _now_ms() -> int:
    return int(time.time() * 1000)


class BrokerApis:
    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        config: Any,
        replicas: ReplicaManager,
        image: Callable[[], MetadataImage],
        channel: ControllerChannel,
        broker_epoch: Callable[[], int],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._topic_metrics = BrokerTopicMetrics(registry if registry is not None else CollectorRegistry())
        self._producer_ids = _ProducerIdBlocks(channel=channel, node_id=node_id, broker_epoch=broker_epoch)
        self._node_id = node_id
        self._cluster_id = cluster_id
        self._config = config
        self._replicas = replicas
        self._image = image
        self._channel = channel
        self._forwarder = EnvelopeForwarder(channel=channel)
        self.authorizer = NodeAuthorizer(config.originals, image=image)
        self._replica_apis = ReplicaApis(replicas=replicas, authorizer=self.authorizer)
        # Encoded Metadata answers of the current image, by question (`metadata`).
        self._metadata_cache: dict[tuple[Any, ...], EncodedResponse] = {}
        self._metadata_cache_image: MetadataImage | None = None
        self._configs = BrokerConfigDescriber(node_id=node_id, static_config=config.originals, image=image,
                                              may_describe=self._may_describe_configs)

    def register(self, listener: Listener) -> None:
        handlers = {
            PRODUCE: self.produce,
            FETCH: self.fetch,
            LIST_OFFSETS: self.list_offsets,
            METADATA: self.metadata,
            DESCRIBE_CLUSTER: self.describe_cluster,
            INIT_PRODUCER_ID: self.init_producer_id,
            DESCRIBE_CONFIGS: self._configs.describe_configs,
            DESCRIBE_TOPIC_PARTITIONS: self.describe_topic_partitions,
            DESCRIBE_USER_SCRAM_CREDENTIALS: self.describe_user_scram_credentials,
            DESCRIBE_ACLS: self.describe_acls,
            DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas,
        }
        listener.register_all(handlers, versions=CLIENT_API_VERSIONS)
        # As Kafka 4.x: Produce v0-2 are gone (v3 is the baseline) but ApiVersions lists Produce
        # from v0 for librdkafka (KAFKA-18659); a v0-2 request closes its connection, as Kafka's.
        listener.advertise_from(PRODUCE, 0)
        self._replica_apis.register(listener)
        for api_key, (low, high) in FORWARDED_API_VERSIONS.items():
            listener.register(api_key, min_version=low, max_version=high, handler=self._forwarder.forward)

    # -- authorization -------------------------------------------------------------------------
    def _may(self, ctx: RequestContext, operation: AclOperation, topic: str) -> bool:
        return self.authorizer.authorize(ctx, operation, ResourceType.TOPIC, topic)

    def _may_describe_configs(self, ctx: RequestContext, resource_type: int, name: str) -> ErrorCode | None:
        if resource_type == _TOPIC_RESOURCE:
            allowed = self._may(ctx, AclOperation.DESCRIBE_CONFIGS, name)
            return None if allowed else ErrorCode.topic_authorization_failed
        allowed = self.authorizer.authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS)
        return None if allowed else ErrorCode.cluster_authorization_failed

    async def describe_acls(self, request: Any, ctx: RequestContext) -> Any:
        return describe_acls(request, ctx, authorizer=self.authorizer, image=self._image())

    async def describe_client_quotas(self, request: Any, ctx: RequestContext) -> Any:
        return describe_client_quotas(request, ctx, image=self._image(), authorizer=self.authorizer)

    # -- DescribeUserScramCredentials ------------------------------------------------------------
    async def describe_user_scram_credentials(self, request: Any, ctx: RequestContext) -> Any:
        """From the metadata image, as a KRaft broker answers it: mechanisms and iterations, never
        salts or keys; every user when `users` is null. DESCRIBE on the cluster is required."""
        if not self.authorizer.authorize_cluster(ctx, AclOperation.DESCRIBE):
            return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                                      error_message="Cluster authorization failed.", results=())
        module = ctx.response_schema
        by_user: dict[str, list[Any]] = {}
        for (mechanism, user), record in sorted(self._image().scram.credentials.items()):
            by_user.setdefault(user, []).append(module.CredentialInfo(mechanism=i8(mechanism),
                                                                      iterations=i32(record.iterations)))
        names = sorted(by_user) if request.users is None else [u.name for u in request.users]
        seen = Counter(names)
        results = []
        for name in dict.fromkeys(names):
            if seen[name] > 1:
                code, message = ErrorCode.duplicate_resource, "Cannot describe SCRAM credentials for the same user twice in a single request"
            elif name not in by_user:
                code, message = ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist"
            else:
                code, message = ErrorCode.none, None
            results.append(module.DescribeUserScramCredentialsResult(
                user=name, error_code=code, error_message=message,
                credential_infos=tuple(by_user.get(name, ())) if code == ErrorCode.none else ()))
        return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                                  results=tuple(results))

    # -- Metadata ----------------------------------------------------------------------------------
    async def metadata(self, request: Any, ctx: RequestContext) -> Any:
        """Kafka's Metadata answer, encoded once per image and question (`EncodedResponse`):
        between two metadata changes every client asking the same gets the same bytes. Not
        cached: answers that start an auto-creation, and any answer while an authorizer is on
        (it depends on the principal and host, and Kafka logs each denial)."""
        image = self._image()
        if image is not self._metadata_cache_image:
            self._metadata_cache.clear()
            self._metadata_cache_image = image
        key = None if self.authorizer.enabled else _metadata_question(request, ctx)
        cached = None if key is None else self._metadata_cache.get(key)
        if cached is not None:
            return cached
        response, creating = self._metadata_answer(request, ctx, image)
        if key is None or creating:
            return response
        if sum(len(topic.partitions) for topic in response.topics) > _METADATA_ENCODE_OFF_LOOP_PARTITIONS:
            # A large answer is encoded in a worker thread, as the listener encodes large answers.
            encoded = await asyncio.to_thread(EncodedResponse.of, response)
        else:
            encoded = EncodedResponse.of(response)
        if len(self._metadata_cache) >= _METADATA_CACHE_ENTRIES:
            self._metadata_cache.pop(next(iter(self._metadata_cache)))
        self._metadata_cache[key] = encoded
        return encoded

    def _metadata_answer(self, request: Any, ctx: RequestContext, image: MetadataImage) -> tuple[Any, bool]:
        """The Metadata response, and whether it started creating topics."""
        module = ctx.response_schema
        listener_name = ctx.listener_name
        brokers = []
        for broker in sorted(image.cluster.brokers.values(), key=lambda b: b.id):
            endpoint = broker.listener(listener_name)
            if broker.fenced or endpoint is None:
                continue
            brokers.append(make_entity(module.MetadataResponseBroker, node_id=BrokerId(broker.id), host=endpoint.host,
                                       port=i32(endpoint.port), rack=broker.rack))
        alive = {int(b.node_id) for b in brokers}
        wanted = request.topics
        topics = []
        if wanted is None:
            names = sorted(image.topics.topics_by_name)
        else:
            names = []
            for t in wanted:
                name = t.name
                if name is None and getattr(t, "topic_id", None) is not None:
                    topic_image = image.topics.get_topic(t.topic_id)
                    if topic_image is None:
                        topics.append(make_entity(module.MetadataResponseTopic, error_code=ErrorCode.unknown_topic_id, name=None,
                                                  topic_id=t.topic_id, is_internal=False, partitions=()))
                        continue
                    name = topic_image.name
                names.append(str(name))
        # Kafka: DESCRIBE on each topic. Listing all topics leaves the others out; a topic asked
        # for by name is answered TOPIC_AUTHORIZATION_FAILED (whether it exists or not).
        if wanted is None:
            names = [n for n in names if self._may(ctx, AclOperation.DESCRIBE, n)]
        to_create = []
        may_create_any = None
        for name in names:
            if wanted is not None and not self._may(ctx, AclOperation.DESCRIBE, name):
                topics.append(make_entity(module.MetadataResponseTopic, error_code=ErrorCode.topic_authorization_failed,
                                          name=TopicName(name), topic_id=None, is_internal=False, partitions=()))
                continue
            topic_image = image.topics.get_topic_by_name(name)
            if topic_image is None:
                error = ErrorCode.unknown_topic_or_partition
                if getattr(request, "allow_auto_topic_creation", False) and self._config.auto_create_topics_enable \
                        and wanted is not None:
                    # Auto-creation needs CREATE on the cluster or on the topic.
                    if may_create_any is None:
                        may_create_any = self.authorizer.authorize_cluster(ctx, AclOperation.CREATE)
                    if may_create_any or self._may(ctx, AclOperation.CREATE, name):
                        to_create.append(name)
                        error = ErrorCode.leader_not_available
                    else:
                        error = ErrorCode.topic_authorization_failed
                topics.append(make_entity(module.MetadataResponseTopic, error_code=error, name=TopicName(name), topic_id=None,
                                          is_internal=False, partitions=()))
                continue
            partitions = []
            for index in sorted(topic_image.partitions):
                registration = topic_image.partitions[index]
                error = ErrorCode.none
                if registration.leader < 0 or registration.leader not in alive:
                    error = ErrorCode.leader_not_available
                partitions.append(make_entity(
                    module.MetadataResponsePartition,
                    error_code=error,
                    partition_index=i32(index),
                    leader_id=BrokerId(registration.leader),
                    leader_epoch=i32(registration.leader_epoch),
                    replica_nodes=tuple(BrokerId(r) for r in registration.replicas),
                    isr_nodes=tuple(BrokerId(r) for r in registration.isr),
                    offline_replicas=tuple(BrokerId(r) for r in registration.replicas if r not in alive),
                ))
            topics.append(make_entity(module.MetadataResponseTopic, error_code=ErrorCode.none, name=TopicName(name),
                                      topic_id=topic_image.id, is_internal=name.startswith("__"), partitions=tuple(partitions)))
        if to_create:
            asyncio.get_running_loop().create_task(self._auto_create(to_create))
        if getattr(request, "include_topic_authorized_operations", False):
            # Kafka: the operations on each topic that passed DESCRIBE (refused ones keep the default).
            topics = [t if t.name is None or t.error_code == ErrorCode.topic_authorization_failed
                      else dataclasses.replace(t, topic_authorized_operations=i32(self.authorizer.authorized_operations(
                          ctx, ResourceType.TOPIC, str(t.name))))
                      for t in topics]
        return make_entity(
            ctx.response_class,
            throttle_time=_NO_THROTTLE,
            brokers=tuple(brokers),
            cluster_id=self._cluster_id,
            controller_id=BrokerId(self._node_id),
            topics=tuple(topics),
            cluster_authorized_operations=i32(self._cluster_authorized_operations(
                ctx, asked=getattr(request, "include_cluster_authorized_operations", False))),
        ), bool(to_create)

    def _cluster_authorized_operations(self, ctx: RequestContext, *, asked: bool) -> int:
        """Kafka: not asked -> the schema default; asked without DESCRIBE on the cluster -> 0."""
        if not asked:
            return NOT_ASKED
        if not self.authorizer.authorize_cluster(ctx, AclOperation.DESCRIBE):
            return 0
        return self.authorizer.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)

    async def describe_topic_partitions(self, request: Any, ctx: RequestContext) -> Any:
        return describe_topic_partitions(request, ctx, image=self._image(),
                                         limit_max=self._config.max_request_partition_size_limit,
                                         authorizer=self.authorizer)

    async def _auto_create(self, names: list[str]) -> None:
        request = CreateTopicsRequest(
            topics=tuple(
                CreatableTopic(name=TopicName(n), num_partitions=i32(self._config.num_partitions),
                               replication_factor=i16(self._config.default_replication_factor), assignments=(), configs=())
                for n in names
            ),
            timeout=i32Timedelta.parse(timedelta(seconds=30)),
            validate_only=False,
        )
        try:
            await self._channel.send(request, timeout_ms=30_000)
        except ControllerUnavailable as error:
            logger.info("Auto-creating %s failed: %s", names, error)

    async def describe_cluster(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        image = self._image()
        if int(getattr(request, "endpoint_type", _BROKER_ENDPOINT_TYPE)) != _BROKER_ENDPOINT_TYPE:
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=ErrorCode.unsupported_endpoint_type,
                               error_message="A broker describes brokers only (endpoint type 1).",
                               endpoint_type=request.endpoint_type, cluster_id=self._cluster_id, brokers=())
        brokers = []
        for registration in sorted(image.cluster.brokers.values(), key=lambda b: b.id):
            endpoint = registration.listener(ctx.listener_name)
            if endpoint is None or (registration.fenced and not getattr(request, "include_fenced_brokers", False)):
                continue
            brokers.append(make_entity(module.DescribeClusterBroker, broker_id=BrokerId(registration.id), host=endpoint.host,
                                       port=i32(endpoint.port), rack=registration.rack, is_fenced=registration.fenced))
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                           endpoint_type=request.endpoint_type if hasattr(request, "endpoint_type") else None,
                           cluster_id=self._cluster_id, controller_id=BrokerId(self._node_id), brokers=tuple(brokers),
                           cluster_authorized_operations=i32(self._cluster_authorized_operations(
                               ctx, asked=bool(request.include_cluster_authorized_operations))))

    # -- InitProducerId --------------------------------------------------------------------------------
    async def init_producer_id(self, request: Any, ctx: RequestContext) -> Any:
        """Idempotent producers only: a fresh producer id (epoch 0) from this broker's block, as
        Kafka's coordinator does for a request without a transactional id. Transactions are not
        served (no FindCoordinator), so a transactional id gets COORDINATOR_NOT_AVAILABLE."""
        def refuse(error: ErrorCode) -> Any:
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=error,
                               producer_id=ProducerId(-1), producer_epoch=i16(-1))

        if request.transactional_id is not None:
            if not self.authorizer.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                             str(request.transactional_id)):
                return refuse(ErrorCode.transactional_id_authorization_failed)
            return refuse(ErrorCode.coordinator_not_available)
        # Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on at least one topic.
        if not (self.authorizer.authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE)
                or self.authorizer.authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC)):
            return refuse(ErrorCode.cluster_authorization_failed)
        try:
            producer_id = await self._producer_ids.next_id()
        except ControllerUnavailable as error:
            logger.info("No producer id block: %s", error)
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=ErrorCode.coordinator_load_in_progress,
                               producer_id=ProducerId(-1), producer_epoch=i16(-1))
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                           producer_id=ProducerId(producer_id), producer_epoch=i16(0))

    # -- Produce -------------------------------------------------------------------------------------
    async def produce(self, request: Any, ctx: RequestContext) -> Any:
        """v13 names topics by id (KIP-516): an id not in the image is UNKNOWN_TOPIC_ID for each of
        its partitions. From v10 a NOT_LEADER_OR_FOLLOWER answer carries the leader this broker
        knows and its endpoint (KIP-951), so the client need not refresh its metadata first."""
        module = ctx.response_schema
        acks = int(request.acks)
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        image = self._image()
        jobs: list[tuple[Any, str | None, int, Any]] = []
        for topic in request.topic_data:
            topic_id = getattr(topic, "topic_id", None)
            if topic_id is None:
                key: Any = str(topic.name)
                name: str | None = key
            else:
                key = topic_id
                topic_image = image.topics.get_topic(topic_id)
                name = None if topic_image is None else topic_image.name
            for data in topic.partition_data:
                jobs.append((key, name, int(data.index), data.records))

        writable = self.authorizer.allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC,
                                           {n for _, n, _, _ in jobs if n is not None})

        async def one(name: str | None, index: int, records: Any) -> tuple[ErrorCode, int, int, str | None]:
            if name is None:
                return ErrorCode.unknown_topic_id, -1, -1, None
            if name not in writable:
                return ErrorCode.topic_authorization_failed, -1, -1, None
            return await self._produce_one(name, index, records, acks=acks, timeout_ms=timeout_ms,
                                           version=ctx.api_version)

        outcomes = await asyncio.gather(*(one(n, p, r) for _, n, p, r in jobs))
        for (_, name, _, _), (error, *_rest) in zip(jobs, outcomes, strict=True):
            if error != ErrorCode.none and name is not None:
                self._topic_metrics.failed_produce_requests.labels(name).inc()
        if acks == 0:
            return NO_RESPONSE
        by_topic: dict[Any, list[Any]] = {}
        leaders: dict[int, Any] = {}
        for (key, name, index, _), (error, base_offset, log_start, message) in zip(jobs, outcomes, strict=True):
            current_leader = None
            if error == ErrorCode.not_leader_or_follower and name is not None and hasattr(module, "LeaderIdAndEpoch"):
                current_leader = self._current_leader(module, image, name, index, listener_name=ctx.listener_name,
                                                      endpoints=leaders)
            by_topic.setdefault(key, []).append(make_entity(
                module.PartitionProduceResponse,
                index=i32(index),
                error_code=error,
                base_offset=base_offset,
                log_append_time=None,
                log_start_offset=log_start,
                record_errors=(),
                error_message=message,
                **({} if current_leader is None else {"current_leader": current_leader}),
            ))
        return make_entity(
            ctx.response_class,
            responses=tuple(
                make_entity(module.TopicProduceResponse, name=TopicName(key) if isinstance(key, str) else None,
                      topic_id=None if isinstance(key, str) else key, partition_responses=tuple(ps))
                for key, ps in by_topic.items()
            ),
            throttle_time=_NO_THROTTLE,
            node_endpoints=tuple(leaders[n] for n in sorted(leaders)),
        )

    @staticmethod
    def _current_leader(module: Any, image: MetadataImage, topic: str, index: int, *, listener_name: str,
                        endpoints: dict[int, Any]) -> Any:
        """The partition's leader and epoch per this broker's image; its endpoint on this listener
        joins `endpoints` (the response's node_endpoints)."""
        topic_image = image.topics.get_topic_by_name(topic)
        registration = None if topic_image is None else topic_image.partitions.get(index)
        if registration is None or registration.leader < 0:
            return module.LeaderIdAndEpoch()
        broker = image.cluster.brokers.get(registration.leader)
        endpoint = None if broker is None or broker.fenced else broker.listener(listener_name)
        if broker is None or endpoint is None:
            return module.LeaderIdAndEpoch()
        endpoints[registration.leader] = module.NodeEndpoint(node_id=BrokerId(registration.leader), host=endpoint.host,
                                                             port=i32(endpoint.port), rack=broker.rack)
        return module.LeaderIdAndEpoch(leader_id=BrokerId(registration.leader), leader_epoch=i32(registration.leader_epoch))

    async def _produce_one(self, topic: str, index: int, records: Any, *, acks: int, timeout_ms: int,
                           version: int) -> tuple[ErrorCode, int, int, str | None]:
        if acks not in (-1, 0, 1):
            return ErrorCode.invalid_required_acks, -1, -1, f"acks must be -1, 0 or 1, not {acks}"
        partition, error = self._replicas.leader_partition(topic, index)
        if partition is None:
            return error, -1, -1, None
        max_bytes = self._replicas.topic_config_int(topic, "max.message.bytes", self._config.message_max_bytes)
        codec, level = self._topic_compression(topic)
        try:
            policy = self._replicas.topic_config(topic, "cleanup.policy") or "delete"
            validated = validate_produce_payload(None if records is None else bytes(records), max_message_bytes=max_bytes,
                                                now_ms=_now_ms(), compacted="compact" in policy.split(","),
                                                target_codec=codec, target_level=level, produce_version=version)
        except ProduceRefused as refusal:
            return ErrorCode(refusal.error_code), -1, -1, str(refusal)
        outcome = await self._replicas.append_as_leader(
            partition, validated.data, acks=acks, timeout_ms=timeout_ms, header=validated.header,
        )
        if outcome.error == ErrorCode.none:
            self._topic_metrics.produced(topic, size_bytes=len(validated.data), records=validated.header.record_count)
        return outcome.error, outcome.base_offset, outcome.log_start_offset, outcome.message

    def _topic_compression(self, topic: str) -> tuple[int | None, int | None]:
        """The codec a topic's batches are stored in (None: the producer's) and the level to
        recompress at: the topic's `compression.type` and `compression.<codec>.level`, else this
        broker's dynamic, the cluster's dynamic and the static settings, else Kafka's defaults."""
        compression_type = self._topic_setting(topic, "compression.type") or "producer"
        try:
            codec = topic_codec(compression_type)
        except UnsupportedCodecError:
            logger.warning("Topic %s has an unknown compression.type %r; storing the producer's codec", topic,
                           compression_type)
            return None, None
        levels = COMPRESSION_LEVELS.get(codec) if codec is not None else None
        if levels is None:
            return codec, None
        text = self._topic_setting(topic, levels.config_key)
        try:
            level = int(text) if text is not None else levels.default
        except ValueError:
            level = levels.default
        if levels.problem(level) is not None:
            logger.warning("Topic %s has %s=%s, outside Kafka's range; using the default %d", topic,
                           levels.config_key, text, levels.default)
            level = levels.default
        return codec, level

    def _topic_setting(self, topic: str, name: str) -> str | None:
        image = self._image()
        broker = ConfigResourceType.BROKER
        value, _, _ = resolve_topic_config(
            TOPIC_CONFIGS[name],
            topic=image.configs.configs(ConfigResource(ConfigResourceType.TOPIC, topic)),
            node=image.configs.configs(ConfigResource(broker, str(self._node_id))),
            cluster=image.configs.configs(ConfigResource(broker, "")),
            static=self._config.originals,
        )
        return None if value is None else value.strip()

    # -- Fetch ---------------------------------------------------------------------------------------
    async def fetch(self, request: Any, ctx: RequestContext) -> Any:
        """Records are answered as regions of the segment files (`SplicedResponse`): the listener
        sends them with sendfile, never reading them into this process."""
        module = ctx.response_schema
        session_id = int(getattr(request, "session_id", 0))
        if session_id != 0:
            return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, error_code=ErrorCode.fetch_session_id_not_found,
                               session_id=i32(0), responses=())
        # v15+ carry the follower in ReplicaState (a tagged field; -1 for consumers).
        replica_id = int(request.replica_id) if hasattr(request, "replica_id") else int(request.replica_state.replica_id)
        max_wait_s = max(0.0, request.max_wait.total_seconds())
        min_bytes = int(request.min_bytes)
        max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_s
        first = True
        answers: list[tuple[str, Any, list[tuple[Any, FileRegion | None]]]] = []
        # Kafka: a follower needs CLUSTER_ACTION on the cluster (else every partition is refused),
        # a consumer READ on each topic.
        if replica_id >= 0:
            follower_allowed = self.authorizer.authorize_cluster(ctx, AclOperation.CLUSTER_ACTION)
            readable: Callable[[str], bool] = lambda name: follower_allowed  # noqa: E731
        else:
            decided: dict[str, bool] = {}

            def readable(name: str) -> bool:
                if name not in decided:
                    decided[name] = self._may(ctx, AclOperation.READ, name)
                return decided[name]
        try:
            while True:
                answers, total, partitions = self._fetch_once(request, module, replica_id=replica_id, max_bytes=max_bytes,
                                                               record_follower_state=first, readable=readable)
                first = False
                remaining = deadline - loop.time()
                if total >= min_bytes or remaining <= 0 or not partitions or any(
                        int(a.error_code) != 0 for _, _, parts in answers for a, _ in parts):
                    break
                _close_regions(answers)  # not enough yet: read again when the partitions change
                waits = [asyncio.ensure_future(p.changed().wait()) for p in partitions]
                try:
                    await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waits:
                        w.cancel()
        except BaseException:
            _close_regions(answers)
            raise
        if replica_id >= 0:
            # What the leader sent of throttled replicas counts against its quota (Kafka's
            # sizeOfThrottledPartitions), whether or not that follower was held back.
            quota = self._replicas.leader_quota
            throttled_bytes = sum(region.size for topic_name, _, parts in answers for answer, region in parts
                                  if region is not None and quota.is_throttled(topic_name, int(answer.partition_index)))
            quota.record(throttled_bytes, now_ms=quota_clock_ms())
        for topic_name, _, parts in answers:
            for answer, region in parts:
                if int(answer.error_code) != 0:
                    self._topic_metrics.failed_fetch_requests.labels(topic_name).inc()
                self._topic_metrics.fetched(topic_name, size_bytes=0 if region is None else region.size,
                                            by_follower=replica_id >= 0)

        def build(records_of: Callable[[FileRegion], bytes]) -> Any:
            return make_entity(
                ctx.response_class,
                throttle_time=_NO_THROTTLE,
                error_code=ErrorCode.none,
                session_id=i32(0),
                responses=tuple(
                    make_entity(module.FetchableTopicResponse, topic=TopicName(t), topic_id=topic_id, partitions=tuple(
                        answer if region is None else dataclasses.replace(answer, records=records_of(region))
                        for answer, region in parts))
                    for t, topic_id, parts in answers),
            )

        regions = [region for _, _, parts in answers for _, region in parts if region is not None]
        if not regions:
            return build(lambda region: b"")
        return SplicedResponse(build, regions)

    def _fetch_once(self, request: Any, module: Any, *, replica_id: int, max_bytes: int, record_follower_state: bool,
                    readable: Callable[[str], bool]) -> tuple[list[tuple[str, Any, list[tuple[Any, FileRegion | None]]]], int, list[Partition]]:
        """(topic name, topic id or None, (partition answer, its records' file region)) per topic;
        v13+ name topics by id."""
        answers: list[tuple[str, Any, list[tuple[Any, FileRegion | None]]]] = []
        total = 0
        waiting: list[Partition] = []
        for topic in request.topics:
            topic_id = getattr(topic, "topic_id", None)
            if topic_id is None:
                name: str | None = str(topic.topic)
            else:
                topic_image = self._image().topics.get_topic(topic_id)
                name = None if topic_image is None else topic_image.name
            parts: list[tuple[Any, FileRegion | None]] = []
            answers.append((name if name is not None else str(topic_id), topic_id, parts))
            for wanted in topic.partitions:
                if name is None or not readable(name):
                    error = ErrorCode.unknown_topic_id if name is None else ErrorCode.topic_authorization_failed
                    parts.append((make_entity(module.PartitionData, partition_index=wanted.partition,
                                              error_code=error, high_watermark=-1, last_stable_offset=-1,
                                              log_start_offset=-1, aborted_transactions=None,
                                              preferred_read_replica=BrokerId(-1), records=b""), None))
                    continue
                answer, region, partition = self._fetch_partition(
                    module, name, wanted, replica_id=replica_id,
                    budget=max_bytes - total if total > 0 else max(max_bytes, 1),
                    record_follower_state=record_follower_state,
                )
                total += 0 if region is None else region.size
                parts.append((answer, region))
                if partition is not None:
                    waiting.append(partition)
        return answers, total, waiting

    def _fetch_partition(self, module: Any, topic: str, wanted: Any, *, replica_id: int, budget: int,
                         record_follower_state: bool) -> tuple[Any, FileRegion | None, Partition | None]:
        index = int(wanted.partition)
        fetch_offset = int(wanted.fetch_offset)

        def answer(error: ErrorCode, partition: Partition | None = None, **extra: Any) -> Any:
            hwm = -1 if partition is None else partition.high_watermark
            start = -1 if partition is None else partition.log.log_start_offset
            return make_entity(module.PartitionData, partition_index=i32(index), error_code=error, high_watermark=hwm,
                               last_stable_offset=hwm, log_start_offset=start, aborted_transactions=None,
                               preferred_read_replica=BrokerId(-1), records=b"", **extra)

        partition, error = leader_at_epoch(self._replicas, topic, index,
                                           current_leader_epoch=int(getattr(wanted, "current_leader_epoch", -1)))
        if partition is None:
            return answer(error), None, None
        log = partition.log
        if replica_id >= 0:
            last_fetched_epoch = int(getattr(wanted, "last_fetched_epoch", -1))
            if last_fetched_epoch >= 0:
                epoch, end_offset = log.end_offset_for_epoch(last_fetched_epoch)
                if epoch < last_fetched_epoch or end_offset < fetch_offset:
                    diverging = module.EpochEndOffset(epoch=i32(epoch), end_offset=end_offset)
                    return answer(ErrorCode.none, partition, diverging_epoch=diverging), None, None
        if fetch_offset < log.log_start_offset or fetch_offset > log.log_end_offset:
            return answer(ErrorCode.offset_out_of_range, partition), None, None
        if replica_id >= 0 and record_follower_state:
            self._replicas.follower_fetch(partition, replica_id=replica_id, fetch_offset=fetch_offset,
                                          log_start_offset=int(getattr(wanted, "log_start_offset", -1)))
        if replica_id >= 0 and self._leader_throttled(partition, replica_id):
            return answer(ErrorCode.none, partition), None, partition
        upper = log.log_end_offset if replica_id >= 0 else partition.high_watermark
        limit = min(int(wanted.partition_max_bytes), budget)
        try:
            region = self._replicas.read_region(partition, offset=fetch_offset,
                                                max_bytes=max(limit, RECORD_BATCH_OVERHEAD), upper_bound=upper)
        except OffsetOutOfRangeError:
            return answer(ErrorCode.offset_out_of_range, partition), None, None
        except ReplicaReadError as error:
            logger.error("Fetch of %s-%d at %d: %s", partition.topic, partition.index, fetch_offset, error)
            return answer(ErrorCode.kafka_storage_error), None, None
        return answer(ErrorCode.none, partition), region, partition

    def _leader_throttled(self, partition: Partition, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: a follower outside the ISR of a throttled replica gets
        no records while the leader quota is exceeded."""
        quota = self._replicas.leader_quota
        return (replica_id not in partition.isr and quota.is_throttled(partition.topic, partition.index)
                and quota.is_exceeded(now_ms=quota_clock_ms()))

    # -- ListOffsets ---------------------------------------------------------------------------------
    async def list_offsets(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        replica_id = int(request.replica_id)
        topics = []
        for topic in request.topics:
            name = str(topic.name)
            parts = []
            describable = self._may(ctx, AclOperation.DESCRIBE, name)  # Kafka: DESCRIBE on the topic
            for wanted in topic.partitions:
                index = int(wanted.partition_index)
                if describable:
                    error, timestamp, offset, epoch = self._list_offset(name, index, wanted, replica_id=replica_id)
                else:
                    error, timestamp, offset, epoch = ErrorCode.topic_authorization_failed, -1, -1, -1
                parts.append(make_entity(module.ListOffsetsPartitionResponse, partition_index=i32(index), error_code=error,
                                         timestamp=timestamp, offset=offset, leader_epoch=i32(epoch)))
            topics.append(module.ListOffsetsTopicResponse(name=TopicName(name), partitions=tuple(parts)))
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, topics=tuple(topics))

    def _list_offset(self, topic: str, index: int, wanted: Any, *, replica_id: int) -> tuple[ErrorCode, int, int, int]:
        partition, error = leader_at_epoch(self._replicas, topic, index,
                                           current_leader_epoch=int(getattr(wanted, "current_leader_epoch", -1)))
        if partition is None:
            return error, -1, -1, -1
        log = partition.log
        timestamp = int(wanted.timestamp)
        upper = log.log_end_offset if replica_id >= 0 else partition.high_watermark
        if timestamp in (_EARLIEST, _EARLIEST_LOCAL):
            # No tiered storage: the log kept locally starts where the log starts.
            return ErrorCode.none, -1, log.log_start_offset, _epoch_at(partition, log.log_start_offset)
        if timestamp == _LATEST:
            return ErrorCode.none, -1, upper, _epoch_at(partition, upper - 1)
        if timestamp == _LATEST_TIERED:
            return ErrorCode.none, -1, -1, -1  # Kafka's answer when the topic has no remote storage
        if timestamp < 0 and timestamp != _MAX_TIMESTAMP:
            return ErrorCode.unsupported_version, -1, -1, -1  # Kafka 4.1's answer to a negative time it does not know
        try:
            found = self._scan_timestamps(partition, target=timestamp, upper=upper)
        except ReplicaReadError as error:
            logger.error("ListOffsets of %s-%d by time: %s", topic, index, error)
            return ErrorCode.kafka_storage_error, -1, -1, -1
        if found is None:
            return ErrorCode.none, -1, -1, -1
        offset, record_timestamp = found
        return ErrorCode.none, record_timestamp, offset, _epoch_at(partition, offset)

    def _scan_timestamps(self, partition: Partition, *, target: int, upper: int) -> tuple[int, int] | None:
        """The first record at or after `target` ms (or the record with the largest timestamp, for
        -3), below `upper`; walks batch headers and decodes only the batch that holds it."""
        log = partition.log
        offset = log.log_start_offset
        best: tuple[int, int] | None = None
        while offset < upper:
            data = self._replicas.read(partition, offset=offset, max_bytes=_SCAN_CHUNK_BYTES, upper_bound=upper)
            if not data:
                break
            for header, view in iter_batches(data):
                offset = header.next_offset
                if target == _MAX_TIMESTAMP:
                    if best is None or header.max_timestamp > best[1]:
                        best = _record_at(header, view, header.max_timestamp.__eq__)
                    continue
                if header.max_timestamp >= target:
                    return _record_at(header, view, lambda ts: ts >= target)
        return best


class _ProducerIdBlocks:
    """Producer ids handed out from blocks the controller allocates (AllocateProducerIds)."""

    def __init__(self, *, channel: ControllerChannel, node_id: int, broker_epoch: Callable[[], int]) -> None:
        self._channel = channel
        self._node_id = node_id
        self._broker_epoch = broker_epoch
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                response = await self._channel.send(
                    AllocateProducerIdsRequest(broker_id=BrokerId(self._node_id), broker_epoch=i64(self._broker_epoch())),
                    timeout_ms=10_000,
                )
                code = ErrorCode(response.error_code)
                if code != ErrorCode.none:
                    raise ControllerUnavailable(f"AllocateProducerIds refused: {code.name}")
                self._next = int(response.producer_id_start)
                self._end = self._next + int(response.producer_id_len)
            producer_id = self._next
            self._next += 1
            return producer_id


def _close_regions(answers: list[tuple[str, Any, list[tuple[Any, FileRegion | None]]]]) -> None:
    for _, _, parts in answers:
        for _, region in parts:
            if region is not None:
                region.close()


def _epoch_at(partition: Partition, offset: int) -> int:
    epoch = -1
    for entry_epoch, start_offset in partition.log.epoch_entries:
        if start_offset <= offset:
            epoch = entry_epoch
    return epoch


def _record_at(header: Any, view: memoryview, accept: Callable[[int], bool]) -> tuple[int, int]:
    body = view[RECORD_BATCH_OVERHEAD:]
    if header.compression_codec != CODEC_NONE:
        body = memoryview(decompress(header.compression_codec, body))  # validated when it was produced
    for record in parse_records(body, count=header.record_count, base_timestamp_ms=header.base_timestamp):
        if accept(record.timestamp_ms):
            return header.base_offset + record.offset_delta, record.timestamp_ms
    return header.last_offset, header.max_timestamp


def _metadata_question(request: Any, ctx: RequestContext) -> tuple[Any, ...]:
    """Everything a Metadata answer of one image depends on, as a cache key: the version and the
    listener (endpoints), the topics asked for by name or id (None: all), auto-creation and the
    authorized-operations flags."""
    wanted = request.topics
    topics = None if wanted is None else tuple((t.name, getattr(t, "topic_id", None)) for t in wanted)
    return (ctx.api_version, ctx.listener_name, topics, bool(getattr(request, "allow_auto_topic_creation", False)),
            bool(getattr(request, "include_cluster_authorized_operations", False)),
            bool(getattr(request, "include_topic_authorized_operations", False)))
