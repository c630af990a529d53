"""Tests of the quorum controller (kraft_engine.controller)."""
