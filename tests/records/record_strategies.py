"""Sample records and Hypothesis strategies for kraft_engine.records' generated entities, derived from their kio field
metadata so that every record type and version is covered without a hand-written strategy each."""

import dataclasses
import types
import uuid
from typing import Any, get_args, get_origin

from hypothesis import strategies as st
from kio.schema.types import BrokerId
from kio.schema.voters_record.v0.data import Endpoint, KRaftVersionFeature, Voter, VotersRecord
from kio.static.primitive import i16, u16

from kraft_engine.kafka_uuid import ZERO_UUID

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
}


def _scalar(kafka_type: str, annotation: Any) -> st.SearchStrategy[Any]:
    if kafka_type in _INT_RANGES:
        low, high = _INT_RANGES[kafka_type]
        return st.integers(low, high)
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kafka_type == "string":
        return st.text(max_size=20)
    if kafka_type == "bytes":
        return st.binary(max_size=20)
    if kafka_type == "uuid":
        return st.one_of(st.just(ZERO_UUID), st.uuids())
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return entity_strategy(annotation)
    raise AssertionError(f"no strategy for {kafka_type}")


def _field_strategy(field: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    annotation = field.type
    nullable = get_origin(annotation) is types.UnionType and type(None) in get_args(annotation)
    if nullable:
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    if get_origin(annotation) is tuple:
        element = get_args(annotation)[0]
        strategy: st.SearchStrategy[Any] = st.lists(
            _scalar(field.metadata["kafka_type"], element), max_size=4
        ).map(tuple)
    else:
        strategy = _scalar(field.metadata["kafka_type"], annotation)
    return st.one_of(st.none(), strategy) if nullable else strategy


def entity_strategy(cls: type[Any]) -> st.SearchStrategy[Any]:
    return st.builds(cls, **{f.name: _field_strategy(f) for f in dataclasses.fields(cls)})




def sample_voters_record() -> VotersRecord:
    """One controller voter (id 1, directory 0…07) on CONTROLLER://localhost:9093, kraft.version 0..1."""
    return VotersRecord(
        version=i16(0),
        voters=(
            Voter(
                voter_id=BrokerId(1),
                voter_directory_id=uuid.UUID(int=7),
                endpoints=(Endpoint(name="CONTROLLER", host="localhost", port=u16(9093)),),
                k_raft_version_feature=KRaftVersionFeature(min_supported_version=i16(0), max_supported_version=i16(1)),
            ),
        ),
    )
