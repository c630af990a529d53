"""Generate `kraft_engine/records/metadata_records.py` from Kafka's metadata-record schemas.

Kafka defines its metadata records as JSON schemas and generates Java classes from them. The engine
needs the same records as kio-compatible dataclasses, so that kio's `entity_writer`/`entity_reader`
encode them byte for byte as Kafka does. Writing 25 records with all their versions by hand would
drift from the schemas; this generator reads the facts (names, types, versions, tags, defaults) and
emits one frozen dataclass per record version. Only facts are carried over: the schemas' prose is
not copied.

Usage (from the repository root):  .venv/bin/python tools/gen_records.py [--check]
"""

from __future__ import annotations

import argparse
import json
import keyword
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = REPO_ROOT.parent / "shared" / "reference" / "kafka-schemas" / "metadata"
OUTPUT = REPO_ROOT / "engine" / "kraft_engine" / "records" / "metadata_records.py"

_PRIMITIVES = {
    # kafka type -> python annotation
    "bool": "bool",
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "float64": "float",
    "string": "str",
    "bytes": "bytes",
    "uuid": "uuid.UUID",
}


class SchemaError(Exception):
    pass


@dataclass(frozen=True)
class Versions:
    """Kafka's version range syntax: "none", "N", "N+" or "N-M"."""

    low: int
    high: int | None  # None: open-ended

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if text is None or text == "none":
            return cls(1, 0)  # empty
        text = str(text).strip()
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return version >= self.low and (self.high is None or version <= self.high)


@dataclass(frozen=True)
class Field:
    name: str
    kafka_type: str  # element type for arrays
    is_array: bool
    struct: str | None  # struct name when the (element) type is a struct
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    default: str | None


@dataclass(frozen=True)
class Struct:
    name: str
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Schema:
    name: str
    api_key: int
    versions: Versions
    fields: tuple[Field, ...]
    structs: tuple[Struct, ...]


def snake_case(name: str) -> str:
    """Kafka's MessageGenerator.toSnakeCase: a run of capitals starts a single word."""
    out = []
    previous_capital = True
    for char in name:
        if char.isupper():
            if not previous_capital:
                out.append("_")
            out.append(char.lower())
            previous_capital = True
        else:
            out.append(char)
            previous_capital = False
    text = "".join(out)
    return text + "_" if keyword.iskeyword(text) else text


def _load_json(path: Path) -> dict[str, object]:
    # Kafka's schema files carry // comments, which JSON does not allow.
    lines = [line for line in path.read_text().splitlines() if not line.strip().startswith("//")]
    loaded: dict[str, object] = json.loads("\n".join(lines))
    return loaded


def _parse_fields(raw_fields: list[dict[str, object]], structs: dict[str, Struct]) -> tuple[Field, ...]:
    fields = []
    for raw in raw_fields:
        type_text = str(raw["type"])
        is_array = type_text.startswith("[]")
        element = type_text[2:] if is_array else type_text
        struct = None
        if element not in _PRIMITIVES:
            struct = element
            if "fields" in raw:
                nested = raw["fields"]
                if not isinstance(nested, list):
                    raise SchemaError(f"fields of {raw['name']} are not a list")
                structs[element] = Struct(element, _parse_fields(nested, structs))
        tag = raw.get("tag")
        default = raw.get("default")
        fields.append(
            Field(
                name=str(raw["name"]),
                kafka_type=element,
                is_array=is_array,
                struct=struct,
                versions=Versions.parse(_optional_str(raw.get("versions"))),
                nullable_versions=Versions.parse(_optional_str(raw.get("nullableVersions"))),
                tagged_versions=Versions.parse(_optional_str(raw.get("taggedVersions"))),
                tag=None if tag is None else int(str(tag)),
                default=None if default is None else str(default).lower(),
            )
        )
    return tuple(fields)


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)


# Records Kafka 4.1 writes whose schema the shared reference does not hold, as facts read off
# Kafka's source (apache/kafka metadata/src/main/resources/common/metadata/) in the generator's own
# terms: ClearElrRecord (KIP-966) follows a min.insync.replicas change while ELR is enabled.
_RECORDS_NOT_IN_THE_REFERENCE: tuple[dict[str, object], ...] = (
    {"apiKey": 28, "type": "metadata", "name": "ClearElrRecord", "validVersions": "0", "flexibleVersions": "0+",
     "fields": [{"name": "TopicName", "type": "string", "versions": "0+"}]},
)


def load_schema(path: Path) -> Schema:
    return _schema_from(_load_json(path), origin=path.name)


def _schema_from(raw: dict[str, object], *, origin: str) -> Schema:
    if raw.get("type") != "metadata":
        raise SchemaError(f"{origin}: not a metadata record schema")
    flexible = Versions.parse(_optional_str(raw.get("flexibleVersions")))
    versions = Versions.parse(_optional_str(raw["validVersions"]))
    if flexible.low != 0 or flexible.high is not None:
        raise SchemaError(f"{origin}: every metadata record is flexible in every version")
    if versions.low != 0 or versions.high is None:
        raise SchemaError(f"{origin}: expected validVersions 0..N")
    structs: dict[str, Struct] = {}
    common = raw.get("commonStructs", [])
    if not isinstance(common, list):
        raise SchemaError(f"{origin}: commonStructs is not a list")
    for item in common:
        structs[str(item["name"])] = Struct(str(item["name"]), ())
        structs[str(item["name"])] = Struct(str(item["name"]), _parse_fields(item["fields"], structs))
    raw_fields = raw["fields"]
    if not isinstance(raw_fields, list):
        raise SchemaError(f"{origin}: fields is not a list")
    fields = _parse_fields(raw_fields, structs)
    schema = Schema(str(raw["name"]), int(str(raw["apiKey"])), versions, fields, tuple(structs.values()))
    _check_supported(schema)
    return schema


def _check_supported(schema: Schema) -> None:
    """Refuse schema shapes the generated representation does not model, instead of mis-encoding them."""
    for field in schema.fields:
        if field.versions.high is not None:
            raise SchemaError(f"{schema.name}.{field.name}: removed fields are not supported")
        if field.tag is not None and field.tagged_versions != field.versions:
            raise SchemaError(f"{schema.name}.{field.name}: a field must be tagged in all its versions")
    for struct in schema.structs:
        for field in struct.fields:
            if field.versions != Versions(0, None) or field.tag is not None:
                raise SchemaError(
                    f"{schema.name}.{struct.name}.{field.name}: nested fields must be plain and present "
                    "in every version, so one nested class serves all versions"
                )


def _annotation(field: Field, *, nullable: bool) -> str:
    element = field.struct if field.struct is not None else _PRIMITIVES[field.kafka_type]
    text = f"tuple[{element}, ...]" if field.is_array else element
    return f"{text} | None" if nullable else text


def _default_literal(field: Field, *, nullable: bool) -> str:
    """Kafka's default for the field, explicit or implicit, as a Python literal."""
    if field.default == "null":
        if not nullable:
            raise SchemaError(f"{field.name}: null default on a non-nullable field")
        return "None"
    if field.is_array:
        if field.default not in (None, ""):
            raise SchemaError(f"{field.name}: arrays can only default to null or empty")
        return "()"
    if field.struct is not None:
        raise SchemaError(f"{field.name}: struct fields with implicit defaults are not supported")
    kafka_type = field.kafka_type
    if kafka_type == "bool":
        return "True" if field.default == "true" else "False"
    if kafka_type in ("int8", "int16", "int32", "int64", "uint16"):
        return str(int(field.default, 0)) if field.default else "0"
    if kafka_type == "float64":
        return repr(float(field.default)) if field.default else "0.0"
    if kafka_type == "string":
        return repr(field.default or "")
    if kafka_type == "bytes":
        return 'b""'
    if kafka_type == "uuid":
        if field.default:
            raise SchemaError(f"{field.name}: uuid defaults are not supported")
        return "ZERO_UUID"
    raise SchemaError(f"{field.name}: unknown type {kafka_type}")


def _field_line(field: Field, *, version: int | None, latest: int) -> str:
    """One dataclass field. `version` None renders a nested struct field."""
    effective = 0 if version is None else version
    nullable = effective in field.nullable_versions
    metadata = f'{{"kafka_type": "{field.kafka_type}", "kafka_name": "{field.name}"'
    tagged = field.tag is not None and effective in field.tagged_versions
    if tagged:
        metadata += f', "tag": {field.tag}'
    metadata += "}"
    # A field gets a default when Kafka's writer can leave it out (tagged), when the schema names
    # one, or when the field is missing from older versions (so a record built for the latest
    # version can be written at an older one, and read back from it).
    has_default = tagged or field.default is not None or field.versions.low > 0
    arguments = []
    if has_default:
        arguments.append(f"default={_default_literal(field, nullable=nullable)}")
    arguments.append(f"metadata={metadata}")
    return f"    {snake_case(field.name)}: {_annotation(field, nullable=nullable)} = field({', '.join(arguments)})"


def _class_lines(
    *, class_name: str, kind: str, version: int, api_key: int | None, fields: list[str], doc: str
) -> list[str]:
    lines = [
        "",
        "",
        "@dataclass(frozen=True, slots=True, kw_only=True)",
        f"class {class_name}:",
        f'    """{doc}"""',
        "",
        f"    __type__: ClassVar = EntityType.{kind}",
        f"    __version__: ClassVar[i16] = i16({version})",
        "    __flexible__: ClassVar[bool] = True",
    ]
    if api_key is not None:
        lines.append(f"    __api_key__: ClassVar[i16] = i16({api_key})")
    if fields:
        lines.append("")
        lines.extend(fields)
    return lines


def version_class_name(schema: Schema, version: int) -> str:
    latest = schema.versions.high
    return schema.name if version == latest else f"{schema.name}V{version}"


def render(schemas: list[Schema]) -> str:
    lines = [
        '"""Kafka\'s KRaft metadata records as kio entities: one frozen dataclass per record version.',
        "",
        "GENERATED by tools/gen_records.py from Kafka's metadata-record schemas. Do not edit by hand;",
        "change the generator and run it again. `<Name>` is the latest version of each record, and",
        "`<Name>V<n>` the older versions. Nested structs do not change between versions, so each has",
        "one class. Field metadata carries the Kafka type, the Kafka field name and the tag of tagged",
        'fields, which is what kio\'s serializer needs."""',
        "",
        "import uuid",
        "from dataclasses import dataclass, field",
        "from typing import ClassVar, Final",
        "",
        "from kio.static.constants import EntityType",
        "from kio.static.primitive import i16",
    ]
    seen_structs: dict[str, Struct] = {}
    registry = []
    names = []
    for schema in sorted(schemas, key=lambda s: s.api_key):
        latest = schema.versions.high
        if latest is None:
            raise SchemaError(f"{schema.name}: open-ended validVersions")
        for struct in schema.structs:
            if struct.name in seen_structs:
                raise SchemaError(f"struct name {struct.name} is used by two records")
            seen_structs[struct.name] = struct
            names.append(struct.name)
            lines += _class_lines(
                class_name=struct.name,
                kind="nested",
                version=0,
                api_key=None,
                fields=[_field_line(f, version=None, latest=latest) for f in struct.fields],
                doc=f"An entry of {schema.name}.",
            )
        classes = []
        for version in range(latest + 1):
            class_name = version_class_name(schema, version)
            classes.append(class_name)
            names.append(class_name)
            doc = f"{schema.name} (api key {schema.api_key}), version {version}"
            doc += ", the latest." if version == latest else "."
            lines += _class_lines(
                class_name=class_name,
                kind="data",
                version=version,
                api_key=schema.api_key,
                fields=[
                    _field_line(f, version=version, latest=latest) for f in schema.fields if version in f.versions
                ],
                doc=doc,
            )
        registry.append((schema.api_key, classes))
    lines += [
        "",
        "",
        "# api key -> the classes of versions 0, 1, ..., latest.",
        "METADATA_RECORD_VERSIONS: Final[dict[int, tuple[type, ...]]] = {",
    ]
    for api_key, classes in registry:
        entry = f"    {api_key}: ({', '.join(classes)}{',' if len(classes) == 1 else ''})"
        if len(entry) > 110:
            entry = f"    {api_key}: (\n" + "".join(f"        {c},\n" for c in classes) + "    )"
        lines.append(entry + ",")
    lines.append("}")
    latest_classes = [classes[-1] for _, classes in registry]
    lines += [
        "",
        "# The latest version of every record: what the engine builds, replays and hands around.",
        "MetadataRecord = (",
        *[f"    {'| ' if index else ''}{name}" for index, name in enumerate(latest_classes)],
        ")",
    ]
    names.append("MetadataRecord")
    if any("ZERO_UUID" in line for line in lines):
        lines[lines.index("from kio.static.primitive import i16") + 1 : 0] = [
            "",
            "from kraft_engine.kafka_uuid import ZERO_UUID",
        ]
    lines += ["", "__all__ = ["]
    lines += [f'    "{name}",' for name in sorted([*names, "METADATA_RECORD_VERSIONS"])]
    lines.append("]")
    return "\n".join(lines) + "\n"


def load_all(schema_dir: Path = SCHEMA_DIR) -> list[Schema]:
    schemas = [load_schema(path) for path in sorted(schema_dir.glob("*.json"))]
    known = {schema.name for schema in schemas}
    extra = [_schema_from(raw, origin=str(raw["name"])) for raw in _RECORDS_NOT_IN_THE_REFERENCE
             if raw["name"] not in known]
    return schemas + extra


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the checked-in file is stale")
    parser.add_argument("--schemas", type=Path, default=SCHEMA_DIR)
    args = parser.parse_args(argv)
    text = render(load_all(args.schemas))
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is stale: run tools/gen_records.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
