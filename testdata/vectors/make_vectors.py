#!/usr/bin/env python3
"""Writes frames.json: tram's byte-exact test vectors.

This is a second, independent encoder written from PROTOCOL.md (not from
the Rust code), so the Rust tests check the Rust codec against the spec
rather than against itself. Run it again after a spec change:

    python3 testdata/vectors/make_vectors.py > testdata/vectors/frames.json
"""
import json

TYPES = {"SETTINGS": 0, "BIND": 1, "CALL": 2, "MESSAGE": 3, "END": 4,
         "CANCEL": 5, "CREDIT": 6, "PING": 7, "GOAWAY": 8}
U64_MAX = 2**64 - 1
U32_MAX = 2**32 - 1


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(b):
    return varint(len(b)) + b


def md_block(entries):
    return b"".join(field(k.encode()) + field(bytes.fromhex(v)) for k, v in entries)


def frame(ftype, flags, body):
    return bytes([TYPES[ftype] << 4 | flags]) + varint(len(body)) + body


SETTING_IDS = {"max_frame_size": 1, "max_concurrent_calls": 2, "initial_credit": 3,
               "max_metadata_size": 4, "max_bound_methods": 5}
DEFAULTS = {"max_frame_size": 4 << 20, "max_concurrent_calls": 1024, "initial_credit": 64,
            "max_metadata_size": 16384, "max_bound_methods": 1024}


def encode(f):
    t = f["type"]
    if t == "SETTINGS":
        body = b""
        for name, sid in sorted(SETTING_IDS.items(), key=lambda kv: kv[1]):
            v = f.get(name, DEFAULTS[name])
            if v != DEFAULTS[name]:
                body += varint(sid) + varint(v)
        return frame(t, 0, body)
    if t == "BIND":
        return frame(t, 0, varint(f["method"]) + f["name"].encode())
    if t == "CALL":
        flags = 0
        body = varint(f["call"]) + varint(f["method"])
        if f.get("end_stream"):
            flags |= 1
        if "message" in f:
            flags |= 2
        if "timeout_micros" in f:
            flags |= 4
            body += varint(f["timeout_micros"])
        if "metadata" in f:
            flags |= 8
            body += field(md_block(f["metadata"]))
        if "message" in f:
            body += bytes.fromhex(f["message"])
        return frame(t, flags, body)
    if t == "MESSAGE":
        flags = 1 if f.get("end_stream") else 0
        body = varint(f["call"])
        if "metadata" in f:
            flags |= 2
            body += field(md_block(f["metadata"]))
        return frame(t, flags, body + bytes.fromhex(f["payload"]))
    if t == "END":
        flags = 0
        body = varint(f["call"]) + varint(f["code"])
        if "message" in f:
            flags |= 1
            body += field(f["message"].encode())
        if "details" in f:
            flags |= 2
            body += field(bytes.fromhex(f["details"]))
        if "trailers" in f:
            flags |= 4
            body += field(md_block(f["trailers"]))
        return frame(t, flags, body)
    if t == "CANCEL":
        return frame(t, 0, varint(f["call"]) + varint(f["code"]))
    if t == "CREDIT":
        return frame(t, 0, varint(f["call"]) + varint(f["n"]))
    if t == "PING":
        return frame(t, 1 if f.get("ack") else 0, bytes.fromhex(f["payload"]))
    if t == "GOAWAY":
        return frame(t, 0, varint(f["last_call_seq"]) + varint(f["reason"]) + f["message"].encode())
    raise ValueError(t)


def hx(s):
    return s.encode().hex()


VALID = [
    ("settings, all defaults (empty body)", {"type": "SETTINGS"}),
    ("settings, every value changed", {"type": "SETTINGS", "max_frame_size": 16384,
                                       "max_concurrent_calls": 0, "initial_credit": 2**31 - 1,
                                       "max_metadata_size": 0, "max_bound_methods": U32_MAX}),
    ("settings, largest frame size", {"type": "SETTINGS", "max_frame_size": 1 << 30}),
    ("bind method 0", {"type": "BIND", "method": 0, "name": "/echo.Echo/Say"}),
    ("bind max method id, non-ASCII name", {"type": "BIND", "method": U32_MAX,
                                            "name": "/pkg.Ünïcode/Méthod"}),
    ("unary call, fast path", {"type": "CALL", "call": 0, "method": 0, "end_stream": True,
                               "message": "0801"}),
    ("unary call, empty message", {"type": "CALL", "call": 1, "method": 2, "end_stream": True,
                                   "message": ""}),
    ("streaming call opened without a message", {"type": "CALL", "call": 5, "method": 1}),
    ("call with every field", {"type": "CALL", "call": U32_MAX, "method": U32_MAX,
                               "end_stream": True, "timeout_micros": U64_MAX,
                               "metadata": [["authorization", hx("Bearer t0k3n")],
                                            ["trace-bin", "00ff7f80"], ["x", ""]],
                               "message": "0a0568656c6c6f"}),
    ("call with zero timeout and empty metadata", {"type": "CALL", "call": 128, "method": 300,
                                                   "timeout_micros": 0, "metadata": []}),
    ("message, empty payload", {"type": "MESSAGE", "call": 0, "payload": ""}),
    ("message, unary response fast path", {"type": "MESSAGE", "call": 7, "end_stream": True,
                                           "payload": "0801120474657374"}),
    ("message, 200-byte payload (2-byte length)", {"type": "MESSAGE", "call": 16383,
                                                   "payload": "ab" * 200}),
    ("message, max call id", {"type": "MESSAGE", "call": U32_MAX, "payload": "00"}),
    ("message with leading metadata (a server's first)",
     {"type": "MESSAGE", "call": 3, "end_stream": True,
      "metadata": [["x-request-id", "616263"], ["trace-bin", "00ff"]], "payload": "0801"}),
    ("message with empty leading metadata", {"type": "MESSAGE", "call": 200,
                                             "metadata": [], "payload": ""}),
    ("end ok, bare", {"type": "END", "call": 0, "code": 0}),
    ("end, client half-close", {"type": "END", "call": 3, "code": 0}),
    ("end with message, details, trailers", {"type": "END", "call": 9, "code": 5,
                                             "message": "key not found: ü",
                                             "details": "0805120a",
                                             "trailers": [["retry-after", hx("10")],
                                                          ["cost-bin", "0102"]]}),
    ("end, empty message and details and trailers", {"type": "END", "call": 1, "code": 16,
                                                     "message": "", "details": "",
                                                     "trailers": []}),
] + [
    (f"end, status code {c}", {"type": "END", "call": 2, "code": c}) for c in range(17)
] + [
    ("cancel", {"type": "CANCEL", "call": 4, "code": 1}),
    ("cancel, deadline", {"type": "CANCEL", "call": U32_MAX, "code": 4}),
    ("credit 1", {"type": "CREDIT", "call": 0, "n": 1}),
    ("credit max", {"type": "CREDIT", "call": 1000, "n": 2**31 - 1}),
    ("ping", {"type": "PING", "payload": "0001020304050607"}),
    ("pong", {"type": "PING", "ack": True, "payload": "ffffffffffffffff"}),
    ("goaway graceful", {"type": "GOAWAY", "last_call_seq": 0, "reason": 0, "message": ""}),
    ("goaway protocol error", {"type": "GOAWAY", "last_call_seq": U64_MAX, "reason": 1,
                               "message": "bad frame"}),
    ("goaway unknown reason kept", {"type": "GOAWAY", "last_call_seq": 42, "reason": U32_MAX,
                                    "message": "x"}),
]

# Valid but not canonical: decoding gives `frame`; encoding `frame` gives `canonical_hex`.
DECODE_ONLY = [
    ("settings, unknown id ignored and default sent explicitly",
     frame("SETTINGS", 0, varint(99) + varint(7) + varint(3) + varint(64) + varint(2) + varint(5)),
     {"type": "SETTINGS", "max_concurrent_calls": 5}),
    ("settings in reverse order",
     frame("SETTINGS", 0, varint(3) + varint(1) + varint(1) + varint(32768)),
     {"type": "SETTINGS", "max_frame_size": 32768, "initial_credit": 1}),
    ("overlong varint call id (0 in 2 bytes)",
     frame("MESSAGE", 0, b"\x80\x00" + b"\x01"),
     {"type": "MESSAGE", "call": 0, "payload": "01"}),
]

ONE_MIB = 1 << 20
INVALID = [
    ("64 bytes of 0xFF", b"\xff" * 64, "unknown_frame_type"),
    ("unknown frame type 9", b"\x90\x00", "unknown_frame_type"),
    ("unknown frame type 15", b"\xf0\x00", "unknown_frame_type"),
    ("undefined flag on MESSAGE", b"\x34\x01\x00", "unknown_flags"),
    ("message metadata block truncated", frame("MESSAGE", 2, b"\x01\x05ab"), "truncated"),
    ("undefined flag on SETTINGS", b"\x01\x00", "unknown_flags"),
    ("undefined flag on END", b"\x48\x02\x00\x00", "unknown_flags"),
    ("frame announcing 4 GiB", b"\x30" + varint(4 << 30), "frame_too_large"),
    ("frame one byte over the limit", b"\x30" + varint(ONE_MIB + 1), "frame_too_large"),
    ("length varint of 11 bytes", b"\x30" + b"\xff" * 10 + b"\x01", "varint_overflow"),
    ("call id varint overflows u64", frame("MESSAGE", 0, b"\xff" * 10 + b"\x02"),
     "varint_overflow"),
    ("call id above u32", frame("MESSAGE", 0, varint(2**32)), "out_of_range"),
    ("message with empty body (no call id)", frame("MESSAGE", 0, b""), "truncated"),
    ("call id truncated", frame("MESSAGE", 0, b"\x80"), "truncated"),
    ("call without method", frame("CALL", 0, varint(1)), "truncated"),
    ("call without message flag but trailing bytes", frame("CALL", 1, varint(1) + varint(0) + b"x"),
     "trailing_bytes"),
    ("call metadata runs past frame", frame("CALL", 8, varint(1) + varint(0) + varint(5) + b"\x01a"),
     "truncated"),
    ("call metadata uppercase key", frame("CALL", 8, varint(1) + varint(0) + field(b"\x01A\x00")),
     "invalid_metadata"),
    ("call metadata control char in ASCII value",
     frame("CALL", 8, varint(1) + varint(0) + field(b"\x01a\x01\x0a")), "invalid_metadata"),
    ("call metadata entry truncated inside block",
     frame("CALL", 8, varint(1) + varint(0) + field(b"\x02ab")), "invalid_metadata"),
    ("end with status code 17", frame("END", 0, varint(1) + varint(17)), "invalid_code"),
    ("end with huge status code", frame("END", 0, varint(1) + varint(U64_MAX)), "invalid_code"),
    ("end with trailing bytes", frame("END", 0, varint(1) + varint(0) + b"\x00"), "trailing_bytes"),
    ("end message not UTF-8", frame("END", 1, varint(1) + varint(2) + field(b"\xff\xfe")),
     "invalid_utf8"),
    ("end message length past frame", frame("END", 1, varint(1) + varint(2) + varint(9) + b"ab"),
     "truncated"),
    ("cancel with code 99", frame("CANCEL", 0, varint(1) + varint(99)), "invalid_code"),
    ("cancel without code", frame("CANCEL", 0, varint(1)), "truncated"),
    ("credit of zero", frame("CREDIT", 0, varint(1) + varint(0)), "out_of_range"),
    ("credit overflow (2^31)", frame("CREDIT", 0, varint(1) + varint(2**31)), "out_of_range"),
    ("ping of 7 bytes", frame("PING", 0, b"\x00" * 7), "truncated"),
    ("ping of 9 bytes", frame("PING", 0, b"\x00" * 9), "trailing_bytes"),
    ("bind with empty name", frame("BIND", 0, varint(1)), "out_of_range"),
    ("bind name not UTF-8", frame("BIND", 0, varint(1) + b"\xc3\x28"), "invalid_utf8"),
    ("goaway reason above u32", frame("GOAWAY", 0, varint(0) + varint(2**32)), "out_of_range"),
    ("settings repeated id", frame("SETTINGS", 0, varint(2) + varint(1) + varint(2) + varint(1)),
     "invalid_setting"),
    ("settings max_frame_size below 16 KiB", frame("SETTINGS", 0, varint(1) + varint(16383)),
     "invalid_setting"),
    ("settings max_frame_size above 1 GiB", frame("SETTINGS", 0, varint(1) + varint((1 << 30) + 1)),
     "invalid_setting"),
    ("settings initial_credit 2^31", frame("SETTINGS", 0, varint(3) + varint(2**31)),
     "invalid_setting"),
    ("settings initial_credit 0", frame("SETTINGS", 0, varint(3) + varint(0)), "invalid_setting"),
    ("settings value without id pair", frame("SETTINGS", 0, varint(2)), "truncated"),
]

INCOMPLETE = [
    ("empty input", b""),
    ("type byte only", b"\x30"),
    ("length varint cut", b"\x30\x80"),
    ("body cut", b"\x30\x05\x01ab"),
    ("announces the maximum, nothing else", b"\x30" + varint(ONE_MIB)),
]

PREFACES = [
    ("tram v1", "895452414d0d0a01", "ok"),
    ("tram prefix", "89545241", "incomplete"),
    ("tram v2", "895452414d0d0a02", "unsupported_version"),
    ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".hex(), "bad_preface"),
    ("64 bytes of 0xFF", "ff" * 64, "bad_preface"),
]


def main():
    out = {
        "comment": "tram wire protocol test vectors; see PROTOCOL.md. "
                   "Generated by make_vectors.py. All vectors use max_frame_size below.",
        "version": 1,
        "max_frame_size": ONE_MIB,
        "valid": [{"name": n, "frame": f, "hex": encode(f).hex()} for n, f in VALID],
        "decode_only": [{"name": n, "hex": b.hex(), "frame": f, "canonical_hex": encode(f).hex()}
                        for n, b, f in DECODE_ONLY],
        "invalid": [{"name": n, "hex": b.hex(), "error": e} for n, b, e in INVALID],
        "incomplete": [{"name": n, "hex": b.hex()} for n, b in INCOMPLETE],
        "preface": [{"name": n, "hex": h, "result": r} for n, h, r in PREFACES],
    }
    print(json.dumps(out, indent=1, ensure_ascii=False))


main()
