#!/usr/bin/env python3
"""Verifies a ShareLedger hash chain from the LMDB files alone, without ShareLedger.

An independent implementation of docs/log-format.md in another language: it needs only Python and
the `lmdb` binding (`pip install lmdb`), no protobuf library. Exit 0 when the chain holds, 1 at the
first bad position, 2 when the ledger cannot be read.

    scripts/verify_chain.py LEDGER_DIR
"""
import hashlib
import struct
import sys

try:
    import lmdb
except ImportError:
    print("needs the lmdb module: pip install lmdb", file=sys.stderr)
    sys.exit(2)

HASH_TAG = 0x7A  # field 15 (hash), wire type 2


def varint(buf, offset):
    result = shift = 0
    while offset < len(buf) and shift < 64:
        byte = buf[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, offset
        shift += 7
    raise ValueError("truncated varint")


def fields(canonical):
    """Returns {field number: value} of the canonical bytes (varints and byte strings)."""
    out, offset = {}, 0
    while offset < len(canonical):
        tag, offset = varint(canonical, offset)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            out[number], offset = varint(canonical, offset)
        elif wire == 2:
            length, offset = varint(canonical, offset)
            out[number] = canonical[offset:offset + length]
            offset += length
        else:
            raise ValueError(f"unexpected wire type {wire}")
    if offset != len(canonical):
        raise ValueError("field runs past the end")
    return out


def main(path):
    try:
        env = lmdb.open(path, readonly=True, lock=False, max_dbs=32, subdir=True)
        log = env.open_db(b"log", create=False)
        meta = env.open_db(b"meta", create=False)
    except lmdb.Error as error:
        print(f"cannot read {path}: {error}", file=sys.stderr)
        return 2
    previous = bytes(32)
    expected = 1
    with env.begin() as txn:
        for key, value in txn.cursor(db=log):
            (position,) = struct.unpack(">Q", key)
            value = bytes(value)
            problem = None
            if position != expected:
                problem = f"expected position {expected}, found {position}"
            elif len(value) < 34 or value[-34] != HASH_TAG or value[-33] != 32:
                problem = "the value does not end with its 32-byte hash field"
            else:
                canonical, stored_hash = value[:-34], value[-32:]
                try:
                    parsed = fields(canonical)
                except ValueError as error:
                    problem = f"malformed envelope: {error}"
                else:
                    if parsed.get(1) != position:
                        problem = f"envelope says position {parsed.get(1)}"
                    elif parsed.get(14) != previous:
                        problem = "previous_hash does not match the previous event's hash"
                    elif hashlib.sha256(previous + canonical).digest() != stored_hash:
                        problem = "hash mismatch: the event was altered"
            if problem:
                print(f"chain BROKEN at position {expected}: {problem}")
                return 1
            previous = value[-32:]
            expected += 1
        head = txn.get(b"head", db=meta)
        version = txn.get(b"format_version", db=meta)
    count = expected - 1
    if version is not None and struct.unpack(">I", version)[0] < 2:
        # Format 1 also kept a head record; it must name the last event.
        if head is None or len(head) != 48:
            print("no valid head record")
            return 1
        (head_position,) = struct.unpack(">Q", head[:8])
        if head_position != count or head[8:40] != previous:
            print(f"head record ({head_position}) does not name the last event ({count})")
            return 1
    # Format 2: the head is the last entry of the log.
    print(f"chain holds: {count} events, head {count} {previous.hex()}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
