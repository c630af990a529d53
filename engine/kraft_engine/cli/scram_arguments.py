"""Kafka's SCRAM credential argument, as `kafka-storage format --add-scram` takes it.

`SCRAM-SHA-256=[name=alice,password=alice-secret]`, or with a chosen salt and iteration count,
or an already salted password: `SCRAM-SHA-512=[name=alice,iterations=8192,salt="N3E=",
saltedpassword="YCE="]` (salt and salted password in base64). Values may be double-quoted.
"""

from __future__ import annotations

import base64
import binascii
import re

from kraft_engine.errors import KraftError
from kraft_engine.protocol.scram import SCRAM_MECHANISMS, ScramError, scram_credential
from kraft_engine.records import UserScramCredentialRecord

__all__ = ["ScramArgumentError", "parse_scram_argument"]

_ARGUMENT = re.compile(r"(?P<mechanism>[A-Za-z0-9-]+)=\[(?P<body>.*)\]", re.DOTALL)
_PAIR = re.compile(r'\s*(?P<key>[a-zA-Z]+)=(?:"(?P<quoted>[^"]*)"|(?P<plain>[^,]*))\s*(?:,|$)')
_KEYS = ("name", "password", "salt", "saltedpassword", "iterations")


class ScramArgumentError(KraftError, ValueError):
    """A `--add-scram` value that cannot be used; the message says why."""


def parse_scram_argument(text: str) -> UserScramCredentialRecord:
    match = _ARGUMENT.fullmatch(text.strip())
    if match is None:
        raise ScramArgumentError(f"Invalid --add-scram argument {text!r}: expected MECHANISM=[name=...,password=...]")
    mechanism = SCRAM_MECHANISMS.get(match.group("mechanism").upper())
    if mechanism is None:
        raise ScramArgumentError(f"Invalid SCRAM mechanism {match.group('mechanism')}: expected one of "
                                 f"{', '.join(SCRAM_MECHANISMS)}")
    values: dict[str, str] = {}
    body = match.group("body")
    position = 0
    while position < len(body):
        pair = _PAIR.match(body, position)
        if pair is None or pair.end() == position:
            raise ScramArgumentError(f"Invalid --add-scram argument {text!r}: expected key=value pairs")
        key = pair.group("key").lower()
        if key not in _KEYS:
            raise ScramArgumentError(f"Unknown key {key} in --add-scram: expected {', '.join(_KEYS)}")
        values[key] = pair.group("quoted") if pair.group("quoted") is not None else pair.group("plain").strip()
        position = pair.end()
    name = values.get("name")
    if not name:
        raise ScramArgumentError("You must supply 'name' to add-scram")
    try:
        iterations = int(values.get("iterations", "4096"))
        salt = _base64(values["salt"], "salt") if "salt" in values else None
        salted = _base64(values["saltedpassword"], "saltedpassword") if "saltedpassword" in values else None
        if ("password" in values) == (salted is not None):
            raise ScramArgumentError("You must supply one of 'password' or 'saltedpassword' to add-scram")
        credential = scram_credential(mechanism, password=values.get("password"), salt=salt, iterations=iterations,
                                      salted_password=salted)
    except (ScramError, ValueError) as e:
        raise ScramArgumentError(f"Invalid --add-scram argument for {name}: {e}") from None
    return UserScramCredentialRecord(name=name, mechanism=mechanism.mechanism_id, salt=credential.salt,
                                     stored_key=credential.stored_key, server_key=credential.server_key,
                                     iterations=credential.iterations)


def _base64(text: str, key: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ScramArgumentError(f"{key} must be base64, got {text!r}") from None
