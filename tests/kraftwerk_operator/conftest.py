"""Fixtures for the operator's tests."""

from __future__ import annotations

import pytest

from kraft_operator.config_rules import EngineConfigRules

from .builders import FixedLayout


@pytest.fixture
def layout() -> FixedLayout:
    return FixedLayout()


@pytest.fixture
def rules() -> EngineConfigRules:
    return EngineConfigRules()
