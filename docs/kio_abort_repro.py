"""Minimal reproducer: kio 0.6.5's native reader aborts the process on a large declared array length.

Run it in a throwaway process (it kills the interpreter):

    python docs/kio_abort_repro.py; echo "exit $?"

Expected: the reader raises an exception (5 bytes cannot hold 2^32 items). Observed with kio 0.6.5
on x86_64 Linux: `memory allocation of 34359738352 bytes failed`, a backtrace through
`_kio_native::schema::read_field`, and SIGABRT (exit 134 from a shell, -6 from subprocess).
"""

from kio.index import load_request_schema
from kio.serial import entity_reader

# DescribeQuorum v2 (api key 55) is flexible: its first field, `topics`, is a compact array
# whose length is an unsigned varint (count + 1). 0xff 0xff 0xff 0xff 0x0f is the 5-byte varint
# 2^32 - 1, i.e. 2^32 - 2 topics, declared in a 5-byte body.
body = b"\xff\xff\xff\xff\x0f"
request_cls = load_request_schema(55, 2)
print(entity_reader(request_cls)(body, 0))
