#!/usr/bin/env python3
"""Verifies a ShareLedger hash chain, and its signed checkpoints, from the LMDB files alone.

An independent implementation of docs/log-format.md in another language: it needs only Python and
the `lmdb` binding (`pip install lmdb`), no protobuf library and no ShareLedger. With
--trusted-key it also checks every signed checkpoint ("Signed checkpoints" in docs/log-format.md):
signed by a trusted key (Ed25519, RFC 8032: the `cryptography` package when it is installed, else
the RFC's own reference arithmetic below; VERIFY_CHAIN_REFERENCE_ED25519=1 forces the latter), not
beyond the head, and naming the hash the log holds at its position; no checkpoint at all fails too. Exit 0 when everything holds, 1 at the first problem,
2 when the ledger or a key file cannot be read.

With --events it also decodes every event's type (envelope field 12) and prints a count per type;
the access-request events (docs/events.md: AccessRequestsAllowedChanged, AccessRequested,
AccessRequestDenied, IdentityBlocked, IdentityUnblocked) are decoded field by field, and one whose
payload is not a 26-character token and (but for AccessRequestsAllowedChanged) a user record name
fails the check. The events with personal fields (docs/events.md, "Personal data": UserRegistered,
ShareCreated, ShareTitleChanged, ParticipantAdded, ShareParticipantFetched) are decoded too, and it
prints how many hold personal data sealed and how many in plaintext (what `share-ledger audit`
reports as eventsWithPlaintextPersonalData); a sealed box shorter than a nonce and a tag, a keyed
hash that is not 32 bytes, a sealed invitation or lookup address not sealed under the key of the one
hash it carries (subject "#E" or "#P" and the hash in hex), or a PersonalDataForgotten that names
neither a user nor exactly one address, fails the check. No key is needed: the boxes stay closed.

    scripts/verify_chain.py LEDGER_DIR [--trusted-key PREFIX.pub ...] [--events]
"""
import base64
import hashlib
import os
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


EVENT_PREFIX = "shareledger.events.v1."
# The access-request events: payload field number -> name (docs/events.md).
ACCESS_EVENTS = {
    "AccessRequestsAllowedChanged": {1: "token", 2: "allowed"},
    "AccessRequested": {1: "token", 2: "user_record_name"},
    "AccessRequestDenied": {1: "token", 2: "user_record_name"},
    "IdentityBlocked": {1: "token", 2: "user_record_name"},
    "IdentityUnblocked": {1: "token", 2: "user_record_name"},
}


def decode_event(parsed):
    """Returns (event type, decoded access-event fields or None, problem or None) of an envelope."""
    event_type = parsed.get(12, b"").decode("utf-8", "replace")
    name = event_type[len(EVENT_PREFIX):] if event_type.startswith(EVENT_PREFIX) else None
    if name not in ACCESS_EVENTS:
        return event_type, None, None
    try:
        payload = fields(parsed.get(13, b""))
    except ValueError as error:
        return event_type, None, f"{name} payload does not decode: {error}"
    decoded = {}
    for number, value in payload.items():
        key = ACCESS_EVENTS[name].get(number)
        if key is None:
            continue  # a field a later release added: skipped, as protobuf readers do
        decoded[key] = bool(value) if key == "allowed" else bytes(value).decode("utf-8", "replace")
    if len(decoded.get("token", "")) != 26:
        return event_type, decoded, f"{name} has no 26-character share token"
    if name != "AccessRequestsAllowedChanged" and not decoded.get("user_record_name"):
        return event_type, decoded, f"{name} names no user"
    return event_type, decoded, None


# The events with personal fields (docs/events.md, "Personal data"): payload field numbers of the
# plaintext fields (a number -> nested numbers for a LookupInfo), and of the SealedPersonalData.
PERSONAL_EVENTS = {
    # UserRegistered: email 2, phone 3, name 6 (schema 1: given 4, family 5); sealed 7.
    "UserRegistered": ({2: None, 3: None, 4: None, 5: None, 6: None}, 7, False),
    "ShareCreated": ({6: None}, 9, False),
    "ShareTitleChanged": ({2: None}, 3, False),
    # LookupInfo: email 1, phone 2 (3, the user record name, is an identifier).
    "ParticipantAdded": ({4: (1, 2)}, 9, True),
    "ShareParticipantFetched": ({1: (1, 2)}, 4, True),
}
BOX_MINIMUM = 12 + 16  # AES-GCM nonce and tag


def check_sealed(sealed, is_lookup):
    """Returns a problem with a SealedPersonalData message's bytes, or None."""
    try:
        message = fields(sealed)
    except ValueError as error:
        return f"its sealed personal data does not decode: {error}"
    subject = bytes(message.get(1, b"")).decode("utf-8", "replace")
    box, hashes = bytes(message.get(2, b"")), [bytes(message.get(3, b"")), bytes(message.get(4, b""))]
    if len(box) < BOX_MINIMUM or not subject:
        return "its sealed box has no subject, or is shorter than a nonce and a tag"
    if any(len(h) not in (0, 32) for h in hashes):
        return "a keyed hash of its sealed personal data is not 32 bytes"
    if is_lookup:
        present = [(letter, h) for letter, h in zip("EP", hashes) if h]
        if len(present) != 1 or subject != "#" + present[0][0] + present[0][1].hex():
            return "its sealed address is not sealed under the key of the one keyed hash it carries"
    return None


def personal_data(name, payload):
    """Returns (holds plaintext, holds sealed, problem) for an event with personal fields."""
    if name == "PersonalDataForgotten":
        message = fields(payload)
        hashes = [bytes(message.get(2, b"")), bytes(message.get(3, b""))]
        if any(len(h) not in (0, 32) for h in hashes):
            return False, False, "PersonalDataForgotten has a keyed hash that is not 32 bytes"
        if not message.get(1) and sum(1 for h in hashes if h) != 1:
            return False, False, "PersonalDataForgotten names neither a user nor exactly one address"
        return False, False, None
    plaintext_fields, sealed_field, is_lookup = PERSONAL_EVENTS[name]
    message = fields(payload)
    plaintext = False
    for number, nested in plaintext_fields.items():
        value = message.get(number)
        if not value:
            continue
        if nested is None:
            plaintext = True
        else:
            lookup = fields(value)
            plaintext = plaintext or any(lookup.get(n) for n in nested)
    sealed = message.get(sealed_field)
    problem = check_sealed(bytes(sealed), is_lookup) if sealed is not None else None
    return plaintext, sealed is not None, problem


# Ed25519 verification (RFC 8032, section 6: the reference implementation's arithmetic).
ED_P = 2**255 - 19
ED_Q = 2**252 + 27742317777372353535851937790883648493
ED_D = -121665 * pow(121666, ED_P - 2, ED_P) % ED_P
ED_SQRT_M1 = pow(2, (ED_P - 1) // 4, ED_P)


def _ed_add(a, b):
    x = (a[1] - a[0]) * (b[1] - b[0]) % ED_P
    y = (a[1] + a[0]) * (b[1] + b[0]) % ED_P
    c = 2 * a[3] * b[3] * ED_D % ED_P
    d = 2 * a[2] * b[2] % ED_P
    e, f, g, h = y - x, d - c, d + c, y + x
    return (e * f, g * h, f * g, e * h)


def _ed_mul(scalar, point):
    out = (0, 1, 1, 0)
    while scalar > 0:
        if scalar & 1:
            out = _ed_add(out, point)
        point = _ed_add(point, point)
        scalar >>= 1
    return out


def _ed_equal(a, b):
    return (a[0] * b[2] - b[0] * a[2]) % ED_P == 0 and (a[1] * b[2] - b[1] * a[2]) % ED_P == 0


def _ed_recover_x(y, sign):
    if y >= ED_P:
        return None
    x2 = (y * y - 1) * pow(ED_D * y * y + 1, ED_P - 2, ED_P)
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (ED_P + 3) // 8, ED_P)
    if (x * x - x2) % ED_P != 0:
        x = x * ED_SQRT_M1 % ED_P
    if (x * x - x2) % ED_P != 0:
        return None
    if (x & 1) != sign:
        x = ED_P - x
    return x


def _ed_decompress(encoded):
    y = int.from_bytes(encoded, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _ed_recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % ED_P)


_G_Y = 4 * pow(5, ED_P - 2, ED_P) % ED_P
_G_X = _ed_recover_x(_G_Y, 0)
ED_BASE = (_G_X, _G_Y, 1, _G_X * _G_Y % ED_P)


def ed25519_verify(public, message, signature):
    """True when `signature` (64 bytes) is `public`'s (32 bytes) signature of `message`."""
    if len(public) != 32 or len(signature) != 64:
        return False
    try:
        if os.environ.get("VERIFY_CHAIN_REFERENCE_ED25519"):  # tests: use the arithmetic below
            raise ImportError
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        pass
    else:
        try:
            Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
            return True
        except (InvalidSignature, ValueError):
            return False
    a = _ed_decompress(public)
    r = _ed_decompress(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a is None or r is None or s >= ED_Q:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % ED_Q
    return _ed_equal(_ed_mul(s, ED_BASE), _ed_add(r, _ed_mul(h, a)))


CHECKPOINT_DOMAIN = b"shareledger-checkpoint-v1"


def check_checkpoints(txn, checkpoints, hashes, head, trusted):
    """The first problem with the signed checkpoints, or None; and how many were verified."""
    verified = 0
    for key, value in txn.cursor(db=checkpoints):
        key, value = bytes(key), bytes(value)
        if len(key) != 8 or len(value) != 144:
            return f"a checkpoint entry has a {len(key)}-byte key and a {len(value)}-byte value (expected 8 and 144)", verified
        (position,) = struct.unpack(">Q", key)
        if position < 1:
            return "a checkpoint at position 0 (there is no event 0)", verified
        checkpoint_hash, times, public, signature = value[:32], value[32:48], value[48:80], value[80:]
        fingerprint = public[:8].hex()
        if public not in trusted:
            return f"the checkpoint at {position} is signed by key {fingerprint}..., which is not trusted", verified
        if not ed25519_verify(public, CHECKPOINT_DOMAIN + key + checkpoint_hash + times, signature):
            return f"the checkpoint at {position} has a signature that does not verify", verified
        if position > head:
            return f"the checkpoint at {position} lies beyond the head ({head}): the log was truncated", verified
        if hashes[position - 1] != checkpoint_hash:
            return (f"the event at {position} has hash {hashes[position - 1].hex()}, not the signed "
                    f"{checkpoint_hash.hex()}: the history up to {position} was rewritten"), verified
        verified += 1
    if verified == 0:
        return "no signed checkpoint in the ledger (--trusted-key needs at least one)", verified
    return None, verified


def read_key(path):
    with open(path, "rb") as handle:
        key = base64.b64decode(handle.read().strip(), validate=True)
    if len(key) != 32:
        raise ValueError(f"{len(key)} bytes, expected 32")
    return key


def main(path, key_paths, show_events=False):
    trusted = set()
    for key_path in key_paths:
        try:
            trusted.add(read_key(key_path))
        except (OSError, ValueError) as error:
            print(f"cannot read the public key {key_path}: {error}", file=sys.stderr)
            return 2
    try:
        env = lmdb.open(path, readonly=True, lock=False, max_dbs=32, subdir=True)
        log = env.open_db(b"log", create=False)
        meta = env.open_db(b"meta", create=False)
    except lmdb.Error as error:
        print(f"cannot read {path}: {error}", file=sys.stderr)
        return 2
    previous = bytes(32)
    expected = 1
    hashes = []
    types = {}
    personal = {"sealed": 0, "plaintext": 0}
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
                    elif show_events:
                        event_type, _, problem = decode_event(parsed)
                        types[event_type] = types.get(event_type, 0) + 1
                        name = event_type[len(EVENT_PREFIX):] if event_type.startswith(EVENT_PREFIX) else None
                        if problem is None and (name in PERSONAL_EVENTS or name == "PersonalDataForgotten"):
                            try:
                                plaintext, sealed, problem = personal_data(name, parsed.get(13, b""))
                            except ValueError as error:
                                plaintext, sealed, problem = False, False, f"{name} payload does not decode: {error}"
                            personal["plaintext"] += 1 if plaintext else 0
                            personal["sealed"] += 1 if sealed else 0
            if problem:
                print(f"chain BROKEN at position {expected}: {problem}")
                return 1
            previous = value[-32:]
            if trusted:
                hashes.append(previous)
            expected += 1
        head = txn.get(b"head", db=meta)
        version = txn.get(b"format_version", db=meta)
        verified = 0
        if trusted:
            try:
                checkpoints = env.open_db(b"checkpoints", txn=txn, create=False)
            except lmdb.NotFoundError:
                print("checkpoints FAILED: the ledger has no checkpoints database (no checkpoint was ever signed)")
                return 1
            problem, verified = check_checkpoints(txn, checkpoints, hashes, expected - 1, trusted)
            if problem:
                print(f"checkpoints FAILED: {problem}")
                return 1
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
    if show_events:
        for event_type in sorted(types):
            print(f"{types[event_type]:>10}  {event_type}")
        print(f"personal data: {personal['sealed']} events sealed, {personal['plaintext']} events in plaintext")
    signed = f"; {verified} signed checkpoints verified" if trusted else ""
    print(f"chain holds: {count} events, head {count} {previous.hex()}{signed}")
    return 0


def parse(arguments):
    path, keys, events = None, [], False
    while arguments:
        argument = arguments.pop(0)
        if argument == "--events":
            events = True
        elif argument == "--trusted-key" and arguments:
            keys.append(arguments.pop(0))
        elif argument.startswith("--trusted-key="):
            keys.append(argument.split("=", 1)[1])
        elif path is None and not argument.startswith("-"):
            path = argument
        else:
            return None, None, False
    return path, keys, events


if __name__ == "__main__":
    ledger, key_files, events = parse(sys.argv[1:])
    if ledger is None:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(ledger, key_files, events))
