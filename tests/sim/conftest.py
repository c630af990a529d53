"""Fixtures shared by the simulation sweeps."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor

import pytest


@pytest.fixture(scope="module")
def pool() -> Iterator[Executor]:
    """Two worker processes (the CI machine has two cores) that sweeps spread their seeds over."""
    with ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork")) as executor:
        yield executor
