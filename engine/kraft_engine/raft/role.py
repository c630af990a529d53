"""The six KRaft roles, as a value every state object carries."""

from __future__ import annotations

from enum import Enum

__all__ = ["Role"]


class Role(Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"
