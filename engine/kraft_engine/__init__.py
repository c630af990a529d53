"""kraft_engine: a Python implementation of Apache Kafka's KRaft controller and broker.

It speaks Kafka's wire protocol (through kio) and writes Kafka's on-disk formats, so Kafka's own
clients and tools work against it. See ARCHITECTURE.md for the layering: a pure core (raft,
metadata, controller, records) inside an I/O shell (protocol, storage, server, cli).
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
