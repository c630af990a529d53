"""Interop checks against Apache Kafka's own jars."""
