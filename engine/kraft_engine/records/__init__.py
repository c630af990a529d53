"""Kafka's record formats as the engine writes them: metadata records in `ApiMessageAndVersion`
framing, raft control records, and v2 record batches built and read through kio. Pure."""

__all__: list[str] = []
