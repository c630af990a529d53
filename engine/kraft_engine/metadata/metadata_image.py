"""The complete, immutable view of cluster metadata at one point in the log.

Every node builds its `MetadataImage` by replaying the same committed records, and readers grab
one image and use it throughout, never seeing a half-applied change. Sub-images not touched by a
delta are the very same objects in the next image, which is what makes building an image per
committed batch affordable.

`write` turns the image back into records (snapshots, the catch-up delta for a new publisher) in
a fixed order (features, cluster, topics, configs, client quotas, producer ids, ACLs, SCRAM,
delegation tokens; each sorted by key): features first, with metadata.version the very first record, because every later
record's decoding may depend on it. `to_bytes` is that record stream framed as bytes, the form in
which two nodes' images are compared for determinism.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kraft_engine.metadata.client_quotas_image import ClientQuotasImage
from kraft_engine.metadata.cluster_image import ClusterImage
from kraft_engine.metadata.configs_image import ConfigurationsImage
from kraft_engine.metadata.features_image import FeaturesImage
from kraft_engine.metadata.image_writer import ImageWriter, ImageWriterOptions, RecordListWriter
from kraft_engine.metadata.producer_ids_image import ProducerIdsImage
from kraft_engine.metadata.provenance import MetadataProvenance
from kraft_engine.metadata.security_images import AclsImage, DelegationTokensImage, ScramImage
from kraft_engine.metadata.topics_image import TopicsImage

__all__ = ["MetadataImage"]


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class MetadataImage:
    EMPTY: ClassVar[MetadataImage]

    provenance: MetadataProvenance
    features: FeaturesImage
    cluster: ClusterImage
    topics: TopicsImage
    configs: ConfigurationsImage
    client_quotas: ClientQuotasImage
    producer_ids: ProducerIdsImage
    acls: AclsImage
    scram: ScramImage
    delegation_tokens: DelegationTokensImage

    def __repr__(self) -> str:
        # A summary: the full repr of a 100k-partition image would swamp any log or error message.
        return (
            f"MetadataImage(offset={self.provenance.last_contained_offset}, "
            f"epoch={self.provenance.last_contained_epoch}, metadata.version={self.features.metadata_version}, "
            f"brokers={len(self.cluster.brokers)}, topics={len(self.topics.topics_by_id)})"
        )

    def is_empty(self) -> bool:
        return (
            self.features.is_empty()
            and self.cluster.is_empty()
            and self.topics.is_empty()
            and self.configs.is_empty()
            and self.client_quotas.is_empty()
            and self.producer_ids.is_empty()
            and self.acls.is_empty()
            and self.scram.is_empty()
            and self.delegation_tokens.is_empty()
        )

    @property
    def offset(self) -> int:
        return self.provenance.last_contained_offset

    @property
    def highest_offset_and_epoch(self) -> tuple[int, int]:
        return self.provenance.last_contained_offset, self.provenance.last_contained_epoch

    def default_writer_options(self) -> ImageWriterOptions:
        """Write at the image's own metadata.version, refusing to lose anything."""
        return ImageWriterOptions(self.features.metadata_version_or_raise())

    def write(self, writer: ImageWriter, options: ImageWriterOptions | None = None) -> None:
        """Emit the records that rebuild this image. An empty image writes nothing."""
        if self.is_empty():
            return
        if options is None:
            options = self.default_writer_options()
        self.features.write(writer, options)
        self.cluster.write(writer, options)
        self.topics.write(writer, options)
        self.configs.write(writer, options)
        self.client_quotas.write(writer, options)
        self.producer_ids.write(writer, options)
        self.acls.write(writer, options)
        self.scram.write(writer, options)
        self.delegation_tokens.write(writer, options)

    def records(self, options: ImageWriterOptions | None = None) -> RecordListWriter:
        writer = RecordListWriter()
        self.write(writer, options)
        return writer

    def to_bytes(self, options: ImageWriterOptions | None = None) -> bytes:
        """The image's records, encoded and length-framed: equal images give equal bytes."""
        return self.records(options).to_bytes()


MetadataImage.EMPTY = MetadataImage(
    provenance=MetadataProvenance.EMPTY,
    features=FeaturesImage.EMPTY,
    cluster=ClusterImage.EMPTY,
    topics=TopicsImage.EMPTY,
    configs=ConfigurationsImage.EMPTY,
    client_quotas=ClientQuotasImage.EMPTY,
    producer_ids=ProducerIdsImage.EMPTY,
    acls=AclsImage.EMPTY,
    scram=ScramImage.EMPTY,
    delegation_tokens=DelegationTokensImage.EMPTY,
)
