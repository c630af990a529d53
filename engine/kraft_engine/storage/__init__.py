"""Kafka's on-disk formats: log segments and indexes, recovery, snapshots, `quorum-state`,
`meta.properties`, and the formatter."""

__all__: list[str] = []
