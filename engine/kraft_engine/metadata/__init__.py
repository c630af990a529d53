"""Cluster metadata as the controller and every node see it: the immutable `MetadataImage`, the
`MetadataDelta` that records replay into, and the loader that publishes committed batches. Pure."""

from kraft_engine.metadata.client_quotas_image import ClientQuotaEntity, ClientQuotasDelta, ClientQuotasImage
from kraft_engine.metadata.cluster_image import ClusterDelta, ClusterImage
from kraft_engine.metadata.configs_image import (
    ConfigResource,
    ConfigResourceType,
    ConfigurationsDelta,
    ConfigurationsImage,
)
from kraft_engine.metadata.errors import MetadataReplayError, UnwritableMetadataError
from kraft_engine.metadata.features_image import (
    KRAFT_VERSION_FEATURE,
    METADATA_VERSION_FEATURE,
    FeaturesDelta,
    FeaturesImage,
)
from kraft_engine.metadata.image_writer import (
    ImageWriter,
    ImageWriterOptions,
    RecordListWriter,
    raise_on_loss,
)
from kraft_engine.metadata.loader import MetadataLoader
from kraft_engine.metadata.metadata_delta import MetadataDelta
from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.metadata.node_registration import (
    BrokerRegistration,
    ControllerRegistration,
    Endpoint,
    VersionRange,
)
from kraft_engine.metadata.partition_registration import (
    MIGRATING_DIRECTORY,
    NO_LEADER,
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    MergeMemo,
    PartitionRegistration,
)
from kraft_engine.metadata.producer_ids_image import ProducerIdsDelta, ProducerIdsImage
from kraft_engine.metadata.provenance import MetadataProvenance
from kraft_engine.metadata.publishing import (
    LoaderManifest,
    LogDeltaManifest,
    MetadataPublisher,
    SnapshotManifest,
)
from kraft_engine.metadata.security_images import (
    SCRAM_MECHANISMS,
    AclsDelta,
    AclsImage,
    DelegationTokensDelta,
    DelegationTokensImage,
    ScramDelta,
    ScramImage,
)
from kraft_engine.metadata.topics_image import (
    BrokerPartitionIndex,
    LocalReplicaChanges,
    TopicDelta,
    TopicIdPartition,
    TopicImage,
    TopicPartition,
    TopicsDelta,
    TopicsImage,
)

__all__ = [
    "KRAFT_VERSION_FEATURE",
    "METADATA_VERSION_FEATURE",
    "MIGRATING_DIRECTORY",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "SCRAM_MECHANISMS",
    "AclsDelta",
    "AclsImage",
    "BrokerPartitionIndex",
    "BrokerRegistration",
    "ClientQuotaEntity",
    "ClientQuotasDelta",
    "ClientQuotasImage",
    "ClusterDelta",
    "ClusterImage",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigurationsDelta",
    "ConfigurationsImage",
    "ControllerRegistration",
    "DelegationTokensDelta",
    "DelegationTokensImage",
    "Endpoint",
    "FeaturesDelta",
    "FeaturesImage",
    "ImageWriter",
    "ImageWriterOptions",
    "LeaderRecoveryState",
    "LocalReplicaChanges",
    "LoaderManifest",
    "LogDeltaManifest",
    "MergeMemo",
    "MetadataDelta",
    "MetadataImage",
    "MetadataLoader",
    "MetadataProvenance",
    "MetadataPublisher",
    "MetadataReplayError",
    "PartitionRegistration",
    "ProducerIdsDelta",
    "ProducerIdsImage",
    "RecordListWriter",
    "ScramDelta",
    "ScramImage",
    "SnapshotManifest",
    "TopicDelta",
    "TopicIdPartition",
    "TopicImage",
    "TopicPartition",
    "TopicsDelta",
    "TopicsImage",
    "UnwritableMetadataError",
    "VersionRange",
    "raise_on_loss",
]
