"""The `kraft` command, named after Kafka's tools so that runbooks carry over."""

__all__: list[str] = []
