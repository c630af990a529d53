"""The change set that committed records replay into, and that `apply` turns into the next image.

`replay` is the single dispatch over every metadata record type. A type this engine does not know,
or one that has no place in an image (transaction markers belong to the loader), raises
`MetadataReplayError`, as does a record that contradicts the image. Sub-deltas are created on
first use; `apply` carries every sub-image without a sub-delta into the new image by reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kraft_engine.metadata.client_quotas_image import ClientQuotasDelta
from kraft_engine.metadata.cluster_image import ClusterDelta
from kraft_engine.metadata.configs_image import ConfigResource, ConfigResourceType, ConfigurationsDelta
from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.features_image import FeaturesDelta
from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.metadata.producer_ids_image import ProducerIdsDelta
from kraft_engine.metadata.provenance import MetadataProvenance
from kraft_engine.metadata.security_images import AclsDelta, DelegationTokensDelta, ScramDelta
from kraft_engine.metadata.topics_image import TopicsDelta
from kraft_engine.records.metadata_records import (
    AbortTransactionRecord,
    AccessControlEntryRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ClearElrRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
    ZkMigrationStateRecord,
)
from kraft_engine.records.record_runs import PartitionChangeRun

__all__ = ["MetadataDelta"]


class MetadataDelta:
    """Accumulates replayed records on top of `image`. Not thread-safe; single writer by design."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.features_delta: FeaturesDelta | None = None
        self.cluster_delta: ClusterDelta | None = None
        self.topics_delta: TopicsDelta | None = None
        self.configs_delta: ConfigurationsDelta | None = None
        self.client_quotas_delta: ClientQuotasDelta | None = None
        self.producer_ids_delta: ProducerIdsDelta | None = None
        self.acls_delta: AclsDelta | None = None
        self.scram_delta: ScramDelta | None = None
        self.delegation_tokens_delta: DelegationTokensDelta | None = None

    # -- sub-deltas, created on first use --------------------------------------------------------

    def get_or_create_features_delta(self) -> FeaturesDelta:
        if self.features_delta is None:
            self.features_delta = FeaturesDelta(self.image.features)
        return self.features_delta

    def get_or_create_cluster_delta(self) -> ClusterDelta:
        if self.cluster_delta is None:
            self.cluster_delta = ClusterDelta(self.image.cluster)
        return self.cluster_delta

    def get_or_create_topics_delta(self) -> TopicsDelta:
        if self.topics_delta is None:
            self.topics_delta = TopicsDelta(self.image.topics)
        return self.topics_delta

    def get_or_create_configs_delta(self) -> ConfigurationsDelta:
        if self.configs_delta is None:
            self.configs_delta = ConfigurationsDelta(self.image.configs)
        return self.configs_delta

    def get_or_create_client_quotas_delta(self) -> ClientQuotasDelta:
        if self.client_quotas_delta is None:
            self.client_quotas_delta = ClientQuotasDelta(self.image.client_quotas)
        return self.client_quotas_delta

    def get_or_create_acls_delta(self) -> AclsDelta:
        if self.acls_delta is None:
            self.acls_delta = AclsDelta(self.image.acls)
        return self.acls_delta

    def get_or_create_scram_delta(self) -> ScramDelta:
        if self.scram_delta is None:
            self.scram_delta = ScramDelta(self.image.scram)
        return self.scram_delta

    def get_or_create_delegation_tokens_delta(self) -> DelegationTokensDelta:
        if self.delegation_tokens_delta is None:
            self.delegation_tokens_delta = DelegationTokensDelta(self.image.delegation_tokens)
        return self.delegation_tokens_delta

    def get_or_create_producer_ids_delta(self) -> ProducerIdsDelta:
        if self.producer_ids_delta is None:
            self.producer_ids_delta = ProducerIdsDelta(self.image.producer_ids)
        return self.producer_ids_delta

    def metadata_version_changed(self) -> int | None:
        """The new metadata.version when this delta replayed a FeatureLevelRecord for it."""
        return None if self.features_delta is None else self.features_delta.metadata_version_change

    # -- replay ----------------------------------------------------------------------------------

    def replay(self, record: object) -> None:
        """Apply one committed metadata record to this delta."""
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise MetadataReplayError(f"unknown metadata record type {type(record).__name__}: {record!r}")
        handler(self, record)

    def replay_partition_changes(self, records: Sequence[PartitionChangeRecord]) -> None:
        """`replay` of each of these records in turn, all or nothing (see `TopicsDelta`)."""
        self.get_or_create_topics_delta().replay_partition_changes(records)

    def replay_partition_change_run(self, run: PartitionChangeRun) -> None:
        """`replay` of each record of a fan-out's run in turn, all or nothing (see `TopicsDelta`)."""
        self.get_or_create_topics_delta().replay_partition_change_run(run)

    def _replay_remove_topic(self, record: RemoveTopicRecord) -> None:
        name = self.get_or_create_topics_delta().replay_remove_topic(record)
        self.get_or_create_configs_delta().delete_all(ConfigResource(ConfigResourceType.TOPIC, name))

    def finish_snapshot(self) -> None:
        """After replaying a whole snapshot: remove everything the snapshot did not mention."""
        self.get_or_create_features_delta().finish_snapshot()
        self.get_or_create_cluster_delta().finish_snapshot()
        self.get_or_create_topics_delta().finish_snapshot()
        self.get_or_create_configs_delta().finish_snapshot()
        self.get_or_create_client_quotas_delta().finish_snapshot()
        self.get_or_create_producer_ids_delta().finish_snapshot()
        self.get_or_create_acls_delta().finish_snapshot()
        self.get_or_create_scram_delta().finish_snapshot()
        self.get_or_create_delegation_tokens_delta().finish_snapshot()

    def apply(self, provenance: MetadataProvenance) -> MetadataImage:
        """The next image. Sub-images without a sub-delta are the previous image's objects."""
        image = self.image
        return MetadataImage(
            provenance=provenance,
            features=image.features if self.features_delta is None else self.features_delta.apply(),
            cluster=image.cluster if self.cluster_delta is None else self.cluster_delta.apply(),
            topics=image.topics if self.topics_delta is None else self.topics_delta.apply(),
            configs=image.configs if self.configs_delta is None else self.configs_delta.apply(),
            client_quotas=(
                image.client_quotas if self.client_quotas_delta is None else self.client_quotas_delta.apply()
            ),
            producer_ids=(
                image.producer_ids if self.producer_ids_delta is None else self.producer_ids_delta.apply()
            ),
            acls=image.acls if self.acls_delta is None else self.acls_delta.apply(),
            scram=image.scram if self.scram_delta is None else self.scram_delta.apply(),
            delegation_tokens=(
                image.delegation_tokens
                if self.delegation_tokens_delta is None
                else self.delegation_tokens_delta.apply()
            ),
        )


def _not_in_image(record: object) -> None:
    raise MetadataReplayError(
        f"{type(record).__name__} marks a metadata transaction; the loader handles it, an image delta cannot"
    )


def _inert(record: object) -> None:
    """NoOpRecord only advances the log; ZkMigrationStateRecord is retained by Kafka 4.x as a no-op for
    clusters that migrated from ZooKeeper under 3.x."""


_HANDLERS: dict[type, Callable[[MetadataDelta, Any], None]] = {
    RegisterBrokerRecord: lambda d, r: d.get_or_create_cluster_delta().replay_register_broker(r),
    UnregisterBrokerRecord: lambda d, r: d.get_or_create_cluster_delta().replay_unregister_broker(r),
    RegisterControllerRecord: lambda d, r: d.get_or_create_cluster_delta().replay_register_controller(r),
    FenceBrokerRecord: lambda d, r: d.get_or_create_cluster_delta().replay_fence_broker(r),
    UnfenceBrokerRecord: lambda d, r: d.get_or_create_cluster_delta().replay_unfence_broker(r),
    BrokerRegistrationChangeRecord: lambda d, r: d.get_or_create_cluster_delta().replay_broker_registration_change(r),
    TopicRecord: lambda d, r: d.get_or_create_topics_delta().replay_topic(r),
    PartitionRecord: lambda d, r: d.get_or_create_topics_delta().replay_partition(r),
    PartitionChangeRecord: lambda d, r: d.get_or_create_topics_delta().replay_partition_change(r),
    RemoveTopicRecord: MetadataDelta._replay_remove_topic,
    ClearElrRecord: lambda d, r: d.get_or_create_topics_delta().replay_clear_elr(r),
    ConfigRecord: lambda d, r: d.get_or_create_configs_delta().replay_config(r),
    FeatureLevelRecord: lambda d, r: d.get_or_create_features_delta().replay_feature_level(r),
    ProducerIdsRecord: lambda d, r: d.get_or_create_producer_ids_delta().replay_producer_ids(r),
    ClientQuotaRecord: lambda d, r: d.get_or_create_client_quotas_delta().replay_client_quota(r),
    AccessControlEntryRecord: lambda d, r: d.get_or_create_acls_delta().replay_acl(r),
    RemoveAccessControlEntryRecord: lambda d, r: d.get_or_create_acls_delta().replay_remove_acl(r),
    UserScramCredentialRecord: lambda d, r: d.get_or_create_scram_delta().replay_credential(r),
    RemoveUserScramCredentialRecord: lambda d, r: d.get_or_create_scram_delta().replay_remove_credential(r),
    DelegationTokenRecord: lambda d, r: d.get_or_create_delegation_tokens_delta().replay_token(r),
    RemoveDelegationTokenRecord: lambda d, r: d.get_or_create_delegation_tokens_delta().replay_remove_token(r),
    NoOpRecord: lambda d, r: _inert(r),
    ZkMigrationStateRecord: lambda d, r: _inert(r),
    BeginTransactionRecord: lambda d, r: _not_in_image(r),
    EndTransactionRecord: lambda d, r: _not_in_image(r),
    AbortTransactionRecord: lambda d, r: _not_in_image(r),
}
