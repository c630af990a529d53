"""Kafka's wire protocol over asyncio streams: framing, request dispatch by api key and version,
and the client connection. Every message body is a kio entity."""

__all__: list[str] = []
