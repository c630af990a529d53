"""The controller's APIs on the controller listener (Kafka's ControllerApis).

Each handler hands the decoded kio request to the `ControllerService` and turns the outcome
into the response of the request's version: a refusal from the controller (`ControllerApiError`,
e.g. NOT_CONTROLLER on a standby) becomes the error code Kafka puts in that response, per item
for the batch APIs. ApiVersions must tell the truth, so only what the quorum controller
implements is registered. The managers take one version per api (`CONTROLLER_APIS`: CreateTopics
v7, DeleteTopics v6, CreatePartitions v3, UpdateFeatures v1, IncrementalAlterConfigs v1,
DescribeConfigs v4, AlterPartitionReassignments v1, ListPartitionReassignments v0, ElectLeaders v2,
AlterPartition v3, AssignReplicasToDirs v0, AllocateProducerIds v0, BrokerRegistration v4,
BrokerHeartbeat v1, UnregisterBroker v0, ControllerRegistration v0); the listener serves the
ranges Apache Kafka 4.1's controllers advertise (`KAFKA_CONTROLLER_VERSIONS`), bridging other
versions to the managers' (`protocol.version_bridging`), because Kafka brokers forward whatever
version their clients negotiated, and librdkafka or older tools stop short of the newest.

Envelope v0 is served too: Kafka brokers forward CreateTopics and the other admin requests in it,
with the client's principal, which the handlers see as `ctx.principal`.

One addition Kafka's controllers do not have: Metadata v12, answered from the committed metadata
image (topics, partitions, registered brokers), so that `kraft topics --bootstrap-controller` can
list and describe topics without a broker. It never triggers auto-creation.

Writes need the active controller (a standby answers NOT_CONTROLLER); the two reads
(DescribeConfigs, ListPartitionReassignments) are answered by any controller from its stable state,
as Kafka's read events are. DescribeCluster is served by the node itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i64

from kraft_engine.controller import ApiError, ControllerApiError
from kraft_engine.kafka_uuid import ZERO_UUID
from kraft_engine.metadata.authorizer import AclOperation, ResourceType
from kraft_engine.protocol import Listener, RequestContext
from kraft_engine.protocol.large_requests import PARK_EVERY_ITEMS, park
from kraft_engine.protocol.version_bridging import Upgrade, bridge, bridged_handler
from kraft_engine.server.authorization import NodeAuthorizer, describe_acls
from kraft_engine.server.cluster_id_refusals import ClusterIdRefusals
from kraft_engine.server.controller_service import ControllerService, ControllerStopped

__all__ = ["CONTROLLER_APIS", "KAFKA_CONTROLLER_VERSIONS", "ControllerApis"]

METADATA = 3
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DESCRIBE_CONFIGS = 32
CREATE_PARTITIONS = 37
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
ALTER_PARTITION = 56
UPDATE_FEATURES = 57
BROKER_REGISTRATION = 62
BROKER_HEARTBEAT = 63
UNREGISTER_BROKER = 64
ALLOCATE_PRODUCER_IDS = 67
CONTROLLER_REGISTRATION = 70
ASSIGN_REPLICAS_TO_DIRS = 73
ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31

CONTROLLER_APIS: dict[int, int] = {
    CREATE_TOPICS: 7,
    DELETE_TOPICS: 6,
    ALTER_PARTITION: 3,
    UPDATE_FEATURES: 1,
    BROKER_REGISTRATION: 4,
    BROKER_HEARTBEAT: 1,
    UNREGISTER_BROKER: 0,
    CONTROLLER_REGISTRATION: 0,
    METADATA: 12,
    DESCRIBE_CONFIGS: 4,
    CREATE_PARTITIONS: 3,
    ELECT_LEADERS: 2,
    INCREMENTAL_ALTER_CONFIGS: 1,
    ALTER_PARTITION_REASSIGNMENTS: 1,
    LIST_PARTITION_REASSIGNMENTS: 0,
    ALLOCATE_PRODUCER_IDS: 0,
    ASSIGN_REPLICAS_TO_DIRS: 0,
    ALTER_USER_SCRAM_CREDENTIALS: 0,
    DESCRIBE_ACLS: 3,
    CREATE_ACLS: 3,
    DELETE_ACLS: 3,
}
"""api key -> the version the managers take."""

KAFKA_CONTROLLER_VERSIONS: dict[int, tuple[int, int]] = {
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DESCRIBE_CONFIGS: (1, 4),
    CREATE_PARTITIONS: (0, 3),
    ELECT_LEADERS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ALTER_PARTITION: (2, 3),
    UPDATE_FEATURES: (0, 2),
    BROKER_REGISTRATION: (0, 4),
    BROKER_HEARTBEAT: (0, 1),
    UNREGISTER_BROKER: (0, 0),
    ALLOCATE_PRODUCER_IDS: (0, 0),
    CONTROLLER_REGISTRATION: (0, 0),
    ASSIGN_REPLICAS_TO_DIRS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (2, 3),
    DELETE_ACLS: (2, 3),
    METADATA: (12, 12),  # ours alone: Kafka's controllers do not serve Metadata
}
"""api key -> (min, max) version served: what Apache Kafka 4.1.0's controller listener advertises
in ApiVersions (read from a running 4.1.0 controller)."""


_TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC


def _delete_topics_by_name(request: Any, served: type[Any]) -> Any:
    """DeleteTopics v1-v5 name topics in `topic_names`; v6 has `topics` (name or id)."""
    state = sys.modules[served.__module__].DeleteTopicState
    return served(topics=tuple(state(name=name, topic_id=ZERO_UUID) for name in request.topic_names),
                  timeout=request.timeout)


def _preferred_election(request: Any, served: type[Any]) -> Any:
    """ElectLeaders v0 has no election type: it always asks for the preferred leader."""
    return dataclasses.replace(bridge(request, served), election_type=i8(_PREFERRED_ELECTION))


def _isr_without_epochs(request: Any, served: type[Any]) -> Any:
    """AlterPartition v2 names the new ISR by broker id only; v3 adds each broker's epoch, which
    Kafka reads as -1 (unknown) for a v2 request."""
    module = sys.modules[served.__module__]
    return served(
        broker_id=request.broker_id, broker_epoch=request.broker_epoch,
        topics=tuple(module.TopicData(topic_id=t.topic_id, partitions=tuple(
            module.PartitionData(
                partition_index=p.partition_index, leader_epoch=p.leader_epoch,
                new_isr_with_epochs=tuple(module.BrokerState(broker_id=b, broker_epoch=i64(-1)) for b in p.new_isr),
                leader_recovery_state=p.leader_recovery_state, partition_epoch=p.partition_epoch,
            ) for p in t.partitions
        )) for t in request.topics),
    )


_UPGRADES: dict[int, dict[int, Upgrade]] = {
    DELETE_TOPICS: dict.fromkeys(range(1, 6), _delete_topics_by_name),
    ELECT_LEADERS: {0: _preferred_election},
    ALTER_PARTITION: {2: _isr_without_epochs},
}
_PREFERRED_ELECTION = 0

_NO_THROTTLE = timedelta(0)


def _refusal(error: Exception) -> ControllerApiError:
    """The error a client sees. A stopped controller is, to the client, not the controller."""
    if isinstance(error, ControllerApiError):
        return error
    return ControllerApiError(ErrorCode.not_controller, str(error))


def _timeout_ms(request: Any) -> int:
    """The request's own timeout field (CreateTopics, DeleteTopics, CreatePartitions, UpdateFeatures)."""
    return int(request.timeout.total_seconds() * 1000)


_LARGE_REFUSAL_ITEMS = 1000


async def _each(items: Any, make: Callable[[Any], Any]) -> tuple[Any, ...]:
    """`make(item)` for every item of a refused request: in a worker thread when there are many
    (a refused 100,000-topic CreateTopics needs 100,000 results), so the loop keeps its turns, and
    with the results built so far parked out of the garbage collector's walks every
    `PARK_EVERY_ITEMS` (`protocol.large_requests`)."""
    if len(items) <= _LARGE_REFUSAL_ITEMS:
        return tuple(make(item) for item in items)

    def build() -> tuple[Any, ...]:
        results = []
        for index, item in enumerate(items, start=1):
            results.append(make(item))
            if index % PARK_EVERY_ITEMS == 0:
                park()
        return tuple(results)

    return await asyncio.to_thread(build)


DEFAULT_HEARTBEAT_TIMEOUT_MS = 1000
"""How long a heartbeat may wait for the controller: Kafka's broker.heartbeat.interval.ms / 2."""


class ControllerApis:
    def __init__(
        self, service: ControllerService, *, refusals: ClusterIdRefusals | None = None,
        heartbeat_timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS, authorizer: NodeAuthorizer | None = None,
    ) -> None:
        self._service = service
        # Without one, every request is allowed (no `authorizer.class.name`), as in Kafka.
        self._authorizer = authorizer if authorizer is not None else NodeAuthorizer({}, image=lambda: service.image)
        # BrokerRegistration refused with INCONSISTENT_CLUSTER_ID is named and counted like raft's.
        self._refusals = refusals
        self._heartbeat_timeout_ms = heartbeat_timeout_ms

    def register(self, listener: Listener) -> None:
        handlers = {
            CREATE_TOPICS: self.create_topics,
            DELETE_TOPICS: self.delete_topics,
            ALTER_PARTITION: self.alter_partition,
            UPDATE_FEATURES: self.update_features,
            BROKER_REGISTRATION: self.broker_registration,
            BROKER_HEARTBEAT: self.broker_heartbeat,
            UNREGISTER_BROKER: self.unregister_broker,
            CONTROLLER_REGISTRATION: self.controller_registration,
            METADATA: self.metadata,
            DESCRIBE_CONFIGS: self.describe_configs,
            CREATE_PARTITIONS: self.create_partitions,
            ELECT_LEADERS: self.elect_leaders,
            INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ALTER_PARTITION_REASSIGNMENTS: self.alter_partition_reassignments,
            LIST_PARTITION_REASSIGNMENTS: self.list_partition_reassignments,
            ALLOCATE_PRODUCER_IDS: self.allocate_producer_ids,
            ASSIGN_REPLICAS_TO_DIRS: self.assign_replicas_to_dirs,
            ALTER_USER_SCRAM_CREDENTIALS: self.alter_user_scram_credentials,
            DESCRIBE_ACLS: self.describe_acls,
            CREATE_ACLS: self.create_acls,
            DELETE_ACLS: self.delete_acls,
        }
        for api_key, handler in handlers.items():
            versions = KAFKA_CONTROLLER_VERSIONS[api_key]
            listener.register(api_key, min_version=versions[0], max_version=versions[1], handler=bridged_handler(
                api_key, served_version=CONTROLLER_APIS[api_key], versions=versions, handler=handler,
                upgrades=_UPGRADES.get(api_key),
            ))
        # Kafka's controller takes an Envelope only from a principal with CLUSTER_ACTION on the
        # cluster (a broker): anyone else could claim any principal inside it.
        listener.serve_envelope(authorize=lambda ctx: self._authorizer.authorize_cluster(ctx, AclOperation.CLUSTER_ACTION))

    def _require_cluster(self, ctx: RequestContext, operation: AclOperation) -> None:
        if not self._authorizer.authorize_cluster(ctx, operation):
            raise ControllerApiError(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")

    def _may_on_topic(self, ctx: RequestContext, operation: AclOperation, name: str) -> bool:
        return self._authorizer.authorize(ctx, operation, ResourceType.TOPIC, name)

    # -- ACLs ------------------------------------------------------------------------------------
    async def describe_acls(self, request: Any, ctx: RequestContext) -> Any:
        return describe_acls(request, ctx, authorizer=self._authorizer, image=self._service.image)

    async def create_acls(self, request: Any, ctx: RequestContext) -> Any:
        result_cls = ctx.response_schema.AclCreationResult
        return await self._altering_acls("createAcls", lambda c: c.create_acls(request), ctx, refused=lambda error: (
            ctx.response_class(throttle_time=_NO_THROTTLE, results=tuple(
                result_cls(error_code=error.error_code, error_message=error.message) for _ in request.creations))))

    async def delete_acls(self, request: Any, ctx: RequestContext) -> Any:
        result_cls = ctx.response_schema.DeleteAclsFilterResult
        return await self._altering_acls("deleteAcls", lambda c: c.delete_acls(request), ctx, refused=lambda error: (
            ctx.response_class(throttle_time=_NO_THROTTLE, filter_results=tuple(
                result_cls(error_code=error.error_code, error_message=error.message, matching_acls=())
                for _ in request.filters))))

    async def _altering_acls(self, name: str, operation: Callable[[Any], int], ctx: RequestContext, *,
                             refused: Callable[[ControllerApiError], Any]) -> Any:
        """CreateAcls and DeleteAcls need ALTER on the cluster, as in Kafka's ControllerApis."""
        try:
            self._require_cluster(ctx, AclOperation.ALTER)
            return await self._service.write(name, operation)
        except (ControllerApiError, ControllerStopped) as e:
            return refused(_refusal(e))

    # -- admin -----------------------------------------------------------------------------------
    async def create_topics(self, request: Any, ctx: RequestContext) -> Any:
        # Kafka: CREATE on the cluster, or else on each topic (TOPIC_AUTHORIZATION_FAILED).
        denied: list[Any] = []
        if not self._authorizer.authorize_cluster(ctx, AclOperation.CREATE):
            denied = [t for t in request.topics if not self._may_on_topic(ctx, AclOperation.CREATE, t.name)]
            request = dataclasses.replace(request, topics=tuple(t for t in request.topics if t not in denied))
        denied_results = tuple(ctx.response_schema.CreatableTopicResult(
            name=t.name, topic_id=None, error_code=ErrorCode.topic_authorization_failed,
            error_message="Authorization failed.", configs=None) for t in denied)
        if denied and not request.topics:
            return ctx.response_class(throttle_time=_NO_THROTTLE, topics=denied_results)
        try:
            results = await self._service.write("createTopics", lambda c: c.create_topics(request),
                                               timeout_ms=_timeout_ms(request))
        except (ControllerApiError, ControllerStopped) as e:
            error = _refusal(e)
            result_cls = ctx.response_schema.CreatableTopicResult
            results = await _each(request.topics, lambda t: result_cls(
                name=t.name, topic_id=None, error_code=error.error_code, error_message=error.message, configs=None))
        return ctx.response_class(throttle_time=_NO_THROTTLE, topics=(*results, *denied_results))

    async def delete_topics(self, request: Any, ctx: RequestContext) -> Any:
        # Kafka: DELETE on each topic (by name; a topic named by id is looked up in the image).
        topics_image = self._service.image.topics
        denied = []
        for t in request.topics:
            topic = topics_image.topics_by_id.get(t.topic_id) if t.name is None else None
            name = t.name if t.name is not None else (topic.name if topic is not None else None)
            if name is not None and not self._may_on_topic(ctx, AclOperation.DELETE, name):
                denied.append(t)
        if denied:
            request = dataclasses.replace(request, topics=tuple(t for t in request.topics if t not in denied))
        denied_results = tuple(ctx.response_schema.DeletableTopicResult(
            name=t.name, topic_id=t.topic_id, error_code=ErrorCode.topic_authorization_failed,
            error_message="Authorization failed.") for t in denied)
        if denied and not request.topics:
            return ctx.response_class(throttle_time=_NO_THROTTLE, responses=denied_results)
        try:
            results = await self._service.write("deleteTopics", lambda c: c.delete_topics(request),
                                               timeout_ms=_timeout_ms(request))
        except (ControllerApiError, ControllerStopped) as e:
            error = _refusal(e)
            result_cls = ctx.response_schema.DeletableTopicResult
            results = await _each(request.topics, lambda t: result_cls(
                name=t.name, topic_id=t.topic_id, error_code=error.error_code, error_message=error.message))
        return ctx.response_class(throttle_time=_NO_THROTTLE, responses=(*results, *denied_results))

    async def update_features(self, request: Any, ctx: RequestContext) -> Any:
        try:
            self._require_cluster(ctx, AclOperation.ALTER)
            outcome: ApiError = await self._service.write("updateFeatures", lambda c: c.update_features(request),
                                                               timeout_ms=_timeout_ms(request))
        except (ControllerApiError, ControllerStopped) as e:
            error = _refusal(e)
            outcome = ApiError(error.error_code, error.message)
        # Up to v1 Kafka repeats the top-level outcome for every feature named in the request.
        result_cls = ctx.response_schema.UpdatableFeatureResult
        results = tuple(
            result_cls(feature=u.feature, error_code=outcome.error_code, error_message=outcome.message)
            for u in request.feature_updates
        )
        return ctx.response_class(
            throttle_time=_NO_THROTTLE, error_code=outcome.error_code, error_message=outcome.message, results=results
        )

    async def create_partitions(self, request: Any, ctx: RequestContext) -> Any:
        # Kafka: ALTER on each topic.
        denied = [t for t in request.topics if not self._may_on_topic(ctx, AclOperation.ALTER, t.name)]
        denied_results = tuple(ctx.response_schema.CreatePartitionsTopicResult(
            name=t.name, error_code=ErrorCode.topic_authorization_failed, error_message="Authorization failed.")
            for t in denied)
        if denied:
            request = dataclasses.replace(request, topics=tuple(t for t in request.topics if t not in denied))
            if not request.topics:
                return ctx.response_class(throttle_time=_NO_THROTTLE, results=denied_results)
        try:
            response = await self._service.write("createPartitions", lambda c: c.create_partitions(request),
                                                  timeout_ms=_timeout_ms(request))
            return dataclasses.replace(response, results=(*response.results, *denied_results))
        except (ControllerApiError, ControllerStopped) as e:
            error = _refusal(e)
            result_cls = ctx.response_schema.CreatePartitionsTopicResult
            return ctx.response_class(throttle_time=_NO_THROTTLE, results=await _each(request.topics, lambda t: result_cls(
                name=t.name, error_code=error.error_code, error_message=error.message)))

    async def incremental_alter_configs(self, request: Any, ctx: RequestContext) -> Any:
        # Kafka: ALTER_CONFIGS on each topic (TOPIC_AUTHORIZATION_FAILED), on the cluster for
        # broker and broker-logger resources (CLUSTER_AUTHORIZATION_FAILED).
        denied: list[tuple[Any, ErrorCode]] = []
        for resource in request.resources:
            if int(resource.resource_type) == _TOPIC_RESOURCE:
                if not self._may_on_topic(ctx, AclOperation.ALTER_CONFIGS, resource.resource_name):
                    denied.append((resource, ErrorCode.topic_authorization_failed))
            elif not self._authorizer.authorize_cluster(ctx, AclOperation.ALTER_CONFIGS):
                denied.append((resource, ErrorCode.cluster_authorization_failed))
        denied_results = tuple(ctx.response_schema.AlterConfigsResourceResponse(
            error_code=code, error_message="Authorization failed.", resource_type=r.resource_type,
            resource_name=r.resource_name) for r, code in denied)
        if denied:
            refused = [r for r, _ in denied]
            request = dataclasses.replace(request, resources=tuple(r for r in request.resources if r not in refused))
            if not request.resources:
                return ctx.response_class(throttle_time=_NO_THROTTLE, responses=denied_results)
        try:
            response = await self._service.write("incrementalAlterConfigs",
                                                 lambda c: c.incremental_alter_configs(request))
            return dataclasses.replace(response, responses=(*response.responses, *denied_results))
        except (ControllerApiError, ControllerStopped) as e:
            error = _refusal(e)
            result_cls = ctx.response_schema.AlterConfigsResourceResponse
            return ctx.response_class(throttle_time=_NO_THROTTLE, responses=await _each(request.resources, lambda r: result_cls(
                error_code=error.error_code, error_message=error.message, resource_type=r.resource_type,
                resource_name=r.resource_name)))

    async def describe_configs(self, request: Any, ctx: RequestContext) -> Any:
        return await self._service.read("describeConfigs", lambda c: c.describe_configs(request))

    async def alter_partition_reassignments(self, request: Any, ctx: RequestContext) -> Any:
        try:
            self._require_cluster(ctx, AclOperation.ALTER)
            return await self._service.write(
                "alterPartitionReassignments", lambda c: c.alter_partition_reassignments(request)
            )
        except (ControllerApiError, ControllerStopped) as e:
            error = _refusal(e)
            return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=error.error_code,
                                      error_message=error.message, responses=())

    async def list_partition_reassignments(self, request: Any, ctx: RequestContext) -> Any:
        if not self._authorizer.authorize_cluster(ctx, AclOperation.DESCRIBE):
            return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                                      error_message="Cluster authorization failed.", topics=())
        return await self._service.read("listPartitionReassignments", lambda c: c.list_partition_reassignments(request))

    async def elect_leaders(self, request: Any, ctx: RequestContext) -> Any:
        try:
            self._require_cluster(ctx, AclOperation.ALTER)
            return await self._service.write("electLeaders", lambda c: c.elect_leaders(request))
        except (ControllerApiError, ControllerStopped) as e:
            return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=_refusal(e).error_code,
                                      replica_election_results=())

    async def allocate_producer_ids(self, request: Any, ctx: RequestContext) -> Any:
        try:
            self._require_cluster(ctx, AclOperation.CLUSTER_ACTION)
            return await self._service.write("allocateProducerIds", lambda c: c.allocate_producer_ids(request))
        except (ControllerApiError, ControllerStopped) as e:
            return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=_refusal(e).error_code,
                                      producer_id_start=i64(-1), producer_id_len=i32(0))

    async def alter_user_scram_credentials(self, request: Any, ctx: RequestContext) -> Any:
        try:
            self._require_cluster(ctx, AclOperation.ALTER)
            return await self._service.write("alterUserScramCredentials",
                                             lambda c: c.alter_user_scram_credentials(request))
        except (ControllerApiError, ControllerStopped) as e:
            error = _refusal(e)
            result_cls = ctx.response_schema.AlterUserScramCredentialsResult
            names = dict.fromkeys(a.name for a in (*request.deletions, *request.upsertions))
            return ctx.response_class(throttle_time=_NO_THROTTLE, results=tuple(
                result_cls(user=name, error_code=error.error_code, error_message=error.message) for name in names))

    async def assign_replicas_to_dirs(self, request: Any, ctx: RequestContext) -> Any:
        try:
            self._require_cluster(ctx, AclOperation.CLUSTER_ACTION)
            return await self._service.write("assignReplicasToDirs", lambda c: c.assign_replicas_to_dirs(request))
        except (ControllerApiError, ControllerStopped) as e:
            return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=_refusal(e).error_code, directories=())

    # -- brokers and controllers -----------------------------------------------------------------
    async def alter_partition(self, request: Any, ctx: RequestContext) -> Any:
        try:
            self._require_cluster(ctx, AclOperation.CLUSTER_ACTION)
            return await self._service.write("alterPartition", lambda c: c.alter_partition(request))
        except (ControllerApiError, ControllerStopped) as e:
            return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=_refusal(e).error_code, topics=())

    async def broker_registration(self, request: Any, ctx: RequestContext) -> Any:
        service = self._service
        try:
            self._require_cluster(ctx, AclOperation.CLUSTER_ACTION)
            reply = await service.write(
                "registerBroker", lambda c: c.register_broker(
                    request, now_ms=service.now_ms(), clean_shutdown_detection=ctx.api_version >= 3)
            )
        except (ControllerApiError, ControllerStopped) as e:
            response = ctx.response_class(throttle_time=_NO_THROTTLE, error_code=_refusal(e).error_code)
            if self._refusals is not None:
                self._refusals.inbound(request, response, peer_address=ctx.peer)
            return response
        return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                                  broker_epoch=i64(reply.broker_epoch))

    async def broker_heartbeat(self, request: Any, ctx: RequestContext) -> Any:
        service = self._service
        # The contact time is recorded now, before the event waits in the queue.
        service.track_broker_heartbeat(int(request.broker_id), int(request.broker_epoch))
        try:
            self._require_cluster(ctx, AclOperation.CLUSTER_ACTION)
            reply = await service.write(
                "processBrokerHeartbeat", lambda c: c.broker_heartbeat(request, now_ms=service.now_ms()),
                timeout_ms=self._heartbeat_timeout_ms,
            )
        except (ControllerApiError, ControllerStopped) as e:
            if isinstance(e, ControllerApiError) and e.error_code == ErrorCode.request_timed_out:
                # Kafka's processExpiredBrokerHeartbeat: the broker is alive, the controller is
                # slow; refresh its contact time so it is not fenced for our backlog.
                service.track_broker_heartbeat(int(request.broker_id), int(request.broker_epoch))
            return ctx.response_class(
                throttle_time=_NO_THROTTLE, error_code=_refusal(e).error_code, is_caught_up=False, is_fenced=True,
                should_shut_down=False,
            )
        return ctx.response_class(
            throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, is_caught_up=reply.is_caught_up,
            is_fenced=reply.is_fenced, should_shut_down=reply.should_shut_down,
        )

    async def unregister_broker(self, request: Any, ctx: RequestContext) -> Any:
        try:
            self._require_cluster(ctx, AclOperation.ALTER)
            await self._service.write("unregisterBroker", lambda c: c.unregister_broker(int(request.broker_id)))
        except (ControllerApiError, ControllerStopped) as e:
            error = _refusal(e)
            return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=error.error_code,
                                      error_message=error.message)
        return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None)

    async def controller_registration(self, request: Any, ctx: RequestContext) -> Any:
        try:
            self._require_cluster(ctx, AclOperation.CLUSTER_ACTION)
            await self._service.write("registerController", lambda c: c.register_controller(request))
        except (ControllerApiError, ControllerStopped) as e:
            error = _refusal(e)
            return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=error.error_code,
                                      error_message=error.message)
        return ctx.response_class(throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None)

    # -- reads of the committed image --------------------------------------------------------------
    async def metadata(self, request: Any, ctx: RequestContext) -> Any:
        image = self._service.image
        module = ctx.response_schema
        brokers = []
        for broker_id, registration in sorted(image.cluster.brokers.items()):
            if registration.listeners:
                endpoint = registration.listeners[0]
                brokers.append(module.MetadataResponseBroker(
                    node_id=i32(broker_id), host=endpoint.host, port=i32(endpoint.port), rack=registration.rack,
                ))
        topics_image = image.topics
        if request.topics is None:
            wanted = [topics_image.topics_by_name[name] for name in sorted(topics_image.topics_by_name)]
            missing: list[Any] = []
        else:
            wanted, missing = [], []
            for requested in request.topics:
                found = (topics_image.topics_by_name.get(requested.name) if requested.name is not None
                         else topics_image.topics_by_id.get(requested.topic_id))
                if found is None:
                    missing.append(requested)
                else:
                    wanted.append(found)
        live = {b for b, r in image.cluster.brokers.items() if not r.fenced}
        topics = [
            module.MetadataResponseTopic(
                error_code=ErrorCode.none, name=topic.name, topic_id=topic.id, is_internal=False,
                partitions=tuple(
                    module.MetadataResponsePartition(
                        error_code=ErrorCode.none if p.leader >= 0 else ErrorCode.leader_not_available,
                        partition_index=i32(index), leader_id=i32(p.leader), leader_epoch=i32(p.leader_epoch),
                        replica_nodes=tuple(i32(r) for r in p.replicas), isr_nodes=tuple(i32(r) for r in p.isr),
                        offline_replicas=tuple(i32(r) for r in p.replicas if r not in live),
                    )
                    for index, p in sorted(topic.partitions.items())
                ),
            )
            for topic in wanted
        ]
        topics += [
            module.MetadataResponseTopic(
                error_code=ErrorCode.unknown_topic_or_partition if t.name is not None else ErrorCode.unknown_topic_id,
                name=t.name, topic_id=t.topic_id, is_internal=False, partitions=(),
            )
            for t in missing
        ]
        controller_id = self._service.controller.events.leader_id
        return ctx.response_class(
            throttle_time=_NO_THROTTLE, brokers=tuple(brokers), cluster_id=self._service.controller.cluster_control.cluster_id,
            controller_id=i32(-1 if controller_id is None else controller_id), topics=tuple(topics),
        )
