"""Deterministic simulation: a seeded scheduler, an in-memory network that drops, delays,
duplicates and partitions, and a disk that loses unflushed writes on a crash."""

__all__: list[str] = []
