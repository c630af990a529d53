"""Kafka's record formats as the engine writes them: metadata records in `ApiMessageAndVersion`
framing, raft control records, and v2 record batches built and read through kio. Pure."""

from kraft_engine.records.batches import (
    BatchHeader,
    CorruptBatchError,
    DecodedRecord,
    IncompleteBatchError,
    UnsupportedBatchError,
    build_batch,
    decode_records,
    iter_batches,
    read_batch_header,
    validate_batch,
)
from kraft_engine.records.control import (
    ControlRecord,
    ControlRecordError,
    ControlRecordType,
    DecodedControlRecord,
    build_control_batch,
    control_record_type_of,
    decode_control_batch,
    decode_control_key,
    decode_control_record,
    encode_control_key,
    encode_control_record,
)

__all__ = [
    "BatchHeader",
    "ControlRecord",
    "ControlRecordError",
    "ControlRecordType",
    "CorruptBatchError",
    "DecodedControlRecord",
    "DecodedRecord",
    "IncompleteBatchError",
    "UnsupportedBatchError",
    "build_batch",
    "build_control_batch",
    "control_record_type_of",
    "decode_control_batch",
    "decode_control_key",
    "decode_control_record",
    "decode_records",
    "encode_control_key",
    "encode_control_record",
    "iter_batches",
    "read_batch_header",
    "validate_batch",
]
