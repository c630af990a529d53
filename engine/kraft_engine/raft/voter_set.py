"""Who votes: replica keys, endpoints and the voter set.

Under kraft.version 1 the voter set is data read from VotersRecords in the log or a snapshot,
never from config; under kraft.version 0 it is the static `controller.quorum.voters` list. Either
way the rest of the core asks this one immutable value who may vote and what a majority is.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from kio.schema.types import BrokerId
from kio.schema.voters_record.v0.data import Endpoint as _RecordEndpoint
from kio.schema.voters_record.v0.data import KRaftVersionFeature as _RecordVersionFeature
from kio.schema.voters_record.v0.data import Voter as _RecordVoter
from kio.schema.voters_record.v0.data import VotersRecord
from kio.static.primitive import i16, u16

from kraft_engine.kafka_uuid import ZERO_UUID

__all__ = [
    "KRAFT_VERSION_0",
    "KRAFT_VERSION_1",
    "Endpoint",
    "ReplicaKey",
    "VoterNode",
    "VoterSet",
    "parse_static_voters",
]

KRAFT_VERSION_0 = 0
KRAFT_VERSION_1 = 1


def _directory(value: uuid.UUID | None) -> uuid.UUID | None:
    # Kafka's wire form of "no directory id" is the zero Uuid; we normalise it to None.
    return None if value is None or value == ZERO_UUID else value


@dataclass(frozen=True, slots=True, order=True)
class ReplicaKey:
    """A replica's identity: its node id plus the id of its metadata log directory (KIP-853)."""

    id: int
    directory_id: uuid.UUID | None = None

    @staticmethod
    def of(node_id: int, directory_id: uuid.UUID | None) -> ReplicaKey:
        return ReplicaKey(node_id, _directory(directory_id))

    def __str__(self) -> str:
        return f"{self.id}" if self.directory_id is None else f"{self.id}:{self.directory_id}"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener of a node: Kafka's (name, host, port)."""

    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class VoterNode:
    """A voter as the VotersRecord describes it."""

    key: ReplicaKey
    endpoints: tuple[Endpoint, ...]
    min_kraft_version: int = KRAFT_VERSION_0
    max_kraft_version: int = KRAFT_VERSION_1

    def supports_kraft_version(self, version: int) -> bool:
        return self.min_kraft_version <= version <= self.max_kraft_version


class VoterSet:
    """An immutable set of voters keyed by node id (at most one voter per id, as in Kafka)."""

    __slots__ = ("_voters",)

    def __init__(self, voters: Iterable[VoterNode]) -> None:
        by_id: dict[int, VoterNode] = {}
        for voter in voters:
            if voter.key.id in by_id:
                raise ValueError(f"voter id {voter.key.id} appears twice in the voter set")
            by_id[voter.key.id] = voter
        self._voters: Mapping[int, VoterNode] = by_id

    def __iter__(self) -> Iterator[VoterNode]:
        return iter(sorted(self._voters.values(), key=lambda v: v.key.id))

    def __len__(self) -> int:
        return len(self._voters)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and dict(self._voters) == dict(other._voters)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"VoterSet({[str(v.key) for v in self]})"

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(self._voters)

    @property
    def keys(self) -> frozenset[ReplicaKey]:
        return frozenset(v.key for v in self._voters.values())

    @property
    def majority_size(self) -> int:
        return len(self._voters) // 2 + 1

    def get(self, node_id: int) -> VoterNode | None:
        return self._voters.get(node_id)

    def endpoints(self, node_id: int) -> tuple[Endpoint, ...]:
        voter = self._voters.get(node_id)
        return () if voter is None else voter.endpoints

    def is_voter(self, key: ReplicaKey) -> bool:
        """Same id, and the same directory id whenever the voter set records one (VoterSet.isVoter)."""
        voter = self._voters.get(key.id)
        if voter is None:
            return False
        return voter.key.directory_id is None or voter.key.directory_id == key.directory_id

    def is_only_voter(self, key: ReplicaKey) -> bool:
        return len(self._voters) == 1 and self.is_voter(key)

    def has_directory_ids(self) -> bool:
        return all(v.key.directory_id is not None for v in self._voters.values())

    def supports_kraft_version(self, version: int) -> bool:
        return all(v.supports_kraft_version(version) for v in self._voters.values())

    def with_voter(self, voter: VoterNode) -> VoterSet:
        if voter.key.id in self._voters:
            raise ValueError(f"voter id {voter.key.id} is already a voter")
        return VoterSet([*self._voters.values(), voter])

    def without_voter(self, key: ReplicaKey) -> VoterSet:
        if not self.is_voter(key):
            raise ValueError(f"{key} is not a voter")
        return VoterSet(v for v in self._voters.values() if v.key.id != key.id)

    def with_updated_voter(self, voter: VoterNode) -> VoterSet:
        if not self.is_voter(voter.key):
            raise ValueError(f"{voter.key} is not a voter")
        return VoterSet([*(v for v in self._voters.values() if v.key.id != voter.key.id), voter])

    def to_record(self) -> VotersRecord:
        return VotersRecord(
            version=i16(0),
            voters=tuple(
                _RecordVoter(
                    voter_id=BrokerId(v.key.id),
                    voter_directory_id=v.key.directory_id if v.key.directory_id is not None else ZERO_UUID,
                    endpoints=tuple(_RecordEndpoint(name=e.name, host=e.host, port=u16(e.port)) for e in v.endpoints),
                    k_raft_version_feature=_RecordVersionFeature(
                        min_supported_version=i16(v.min_kraft_version),
                        max_supported_version=i16(v.max_kraft_version),
                    ),
                )
                for v in self
            ),
        )

    @staticmethod
    def from_record(record: VotersRecord) -> VoterSet:
        return VoterSet(
            VoterNode(
                key=ReplicaKey.of(v.voter_id, v.voter_directory_id),
                endpoints=tuple(Endpoint(e.name, e.host, e.port) for e in v.endpoints),
                min_kraft_version=v.k_raft_version_feature.min_supported_version,
                max_kraft_version=v.k_raft_version_feature.max_supported_version,
            )
            for v in record.voters
        )


def parse_static_voters(text: str, *, listener_name: str) -> VoterSet:
    """Parse Kafka's `controller.quorum.voters` ("1@host:9093,2@host:9094") into a voter set.

    Static voters have no directory ids (kraft.version 0), so any directory matches them.
    """
    voters = []
    for raw_entry in text.split(","):
        entry = raw_entry.strip()
        if not entry:
            continue
        node_id_text, at, address = entry.partition("@")
        host, colon, port_text = address.rpartition(":")
        if not at or not colon or not host or not node_id_text.strip().isdigit() or not port_text.isdigit():
            raise ValueError(f"controller.quorum.voters entry {entry!r} is not of the form id@host:port")
        port = int(port_text)
        if not 0 < port < 65536:
            raise ValueError(f"controller.quorum.voters entry {entry!r} has an invalid port")
        voters.append(
            VoterNode(
                key=ReplicaKey(int(node_id_text)),
                endpoints=(Endpoint(listener_name, host.strip("[]"), port),),
                min_kraft_version=KRAFT_VERSION_0,
                max_kraft_version=KRAFT_VERSION_0,
            )
        )
    if not voters:
        raise ValueError("controller.quorum.voters is empty")
    return VoterSet(voters)
