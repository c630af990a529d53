"""Cluster metadata as the controller and every node see it: the immutable `MetadataImage`, the
`MetadataDelta` that records replay into, and the loader that publishes committed batches. Pure."""

__all__: list[str] = []
