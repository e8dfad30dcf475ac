//! Every vector in `testdata/vectors/frames.json` must encode to its exact
//! bytes and decode back to its fields; every invalid input must fail with
//! the named error; every incomplete input must ask for more bytes.
#![allow(clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};
use serde_json::{Map, Value, json};
use tram_wire::{
    Bind, Call, Cancel, Code, Credit, End, Frame, FrameDecoder, GoAway, Message, Metadata, Ping,
    Reason, Settings, decode_exact, preface,
};

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../testdata/vectors/frames.json"
    );
    let text = std::fs::read_to_string(path).expect("read frames.json");
    serde_json::from_str(&text).expect("parse frames.json")
}

fn max_frame_size(v: &Value) -> u32 {
    v["max_frame_size"].as_u64().unwrap() as u32
}

#[test]
fn valid_vectors_round_trip() {
    let v = vectors();
    let max = max_frame_size(&v);
    let list = v["valid"].as_array().unwrap();
    assert!(list.len() > 40, "expected the full vector set");
    for vector in list {
        let name = vector["name"].as_str().unwrap();
        let bytes = hex::decode(vector["hex"].as_str().unwrap()).unwrap();
        let frame = frame_from_json(&vector["frame"]);

        let mut encoded = BytesMut::new();
        frame.encode(&mut encoded);
        assert_eq!(hex::encode(&encoded), vector["hex"], "encode: {name}");
        assert_eq!(frame.encoded_len(), bytes.len(), "encoded_len: {name}");

        let decoded = decode_exact(&bytes, max).unwrap_or_else(|e| panic!("decode {name}: {e}"));
        assert_eq!(decoded, frame, "decode: {name}");
        assert_eq!(frame_to_json(&decoded), vector["frame"], "fields: {name}");
    }
}

#[test]
fn decode_only_vectors_decode_and_reencode_canonically() {
    let v = vectors();
    let max = max_frame_size(&v);
    for vector in v["decode_only"].as_array().unwrap() {
        let name = vector["name"].as_str().unwrap();
        let bytes = hex::decode(vector["hex"].as_str().unwrap()).unwrap();
        let decoded = decode_exact(&bytes, max).unwrap_or_else(|e| panic!("decode {name}: {e}"));
        assert_eq!(decoded, frame_from_json(&vector["frame"]), "decode: {name}");
        let mut encoded = BytesMut::new();
        decoded.encode(&mut encoded);
        assert_eq!(
            hex::encode(&encoded),
            vector["canonical_hex"],
            "canonical: {name}"
        );
    }
}

#[test]
fn invalid_vectors_fail_with_the_named_error() {
    let v = vectors();
    let max = max_frame_size(&v);
    for vector in v["invalid"].as_array().unwrap() {
        let name = vector["name"].as_str().unwrap();
        let bytes = hex::decode(vector["hex"].as_str().unwrap()).unwrap();
        // Incrementally, as a connection sees it: the error must come out of
        // the bytes given, never a request for more.
        let mut buf = BytesMut::from(&bytes[..]);
        let err = FrameDecoder::new(max).decode(&mut buf).expect_err(name);
        assert_eq!(err.kind(), vector["error"], "{name}: got {err}");
        assert_eq!(&buf[..], &bytes[..], "{name}: an error consumes nothing");
    }
}

#[test]
fn incomplete_vectors_ask_for_more() {
    let v = vectors();
    let max = max_frame_size(&v);
    for vector in v["incomplete"].as_array().unwrap() {
        let name = vector["name"].as_str().unwrap();
        let bytes = hex::decode(vector["hex"].as_str().unwrap()).unwrap();
        let mut buf = BytesMut::from(&bytes[..]);
        let got = FrameDecoder::new(max).decode(&mut buf);
        assert_eq!(got, Ok(None), "{name}");
        assert_eq!(&buf[..], &bytes[..], "{name}: nothing consumed");
    }
}

#[test]
fn preface_vectors() {
    for vector in vectors()["preface"].as_array().unwrap() {
        let name = vector["name"].as_str().unwrap();
        let bytes = hex::decode(vector["hex"].as_str().unwrap()).unwrap();
        let got = match preface::check(&bytes) {
            Ok(Some(8)) => "ok".to_owned(),
            Ok(Some(n)) => panic!("{name}: preface length {n}"),
            Ok(None) => "incomplete".to_owned(),
            Err(e) => e.kind().to_owned(),
        };
        assert_eq!(got, vector["result"].as_str().unwrap(), "{name}");
    }
}

#[test]
fn every_frame_type_and_flag_is_covered() {
    // The vectors are the contract: make sure they exercise every type and
    // every defined flag bit, so a new flag cannot ship without a vector.
    let v = vectors();
    let mut seen = std::collections::HashSet::new();
    for vector in v["valid"].as_array().unwrap() {
        let first = hex::decode(vector["hex"].as_str().unwrap()).unwrap()[0];
        seen.insert((first >> 4, first & 0xf));
    }
    let flags_of = |ty: u8| -> u8 {
        seen.iter()
            .filter(|(t, _)| *t == ty)
            .fold(0, |acc, (_, f)| acc | f)
    };
    for ty in 0..=8u8 {
        assert!(seen.iter().any(|(t, _)| *t == ty), "no vector of type {ty}");
    }
    assert_eq!(flags_of(2), 0xf, "CALL flags");
    assert_eq!(flags_of(3), 0x3, "MESSAGE flags");
    assert_eq!(flags_of(4), 0x7, "END flags");
    assert_eq!(flags_of(7), 0x1, "PING flags");
}

// --- JSON <-> Frame ------------------------------------------------------

fn u64_of(f: &Value, key: &str) -> u64 {
    f[key]
        .as_u64()
        .unwrap_or_else(|| panic!("field {key} in {f}"))
}

fn u32_of(f: &Value, key: &str) -> u32 {
    u32::try_from(u64_of(f, key)).unwrap()
}

fn hex_of(f: &Value, key: &str) -> Option<Bytes> {
    f.get(key)
        .map(|v| Bytes::from(hex::decode(v.as_str().unwrap()).unwrap()))
}

fn md_of(f: &Value, key: &str) -> Option<Metadata> {
    let entries = f.get(key)?.as_array().unwrap();
    let mut b = Metadata::builder();
    for e in entries {
        let k = e[0].as_str().unwrap();
        let value = hex::decode(e[1].as_str().unwrap()).unwrap();
        if k.ends_with("-bin") {
            b.binary(k, &value).unwrap();
        } else {
            b.ascii(k, std::str::from_utf8(&value).unwrap()).unwrap();
        }
    }
    Some(b.build())
}

fn code_of(f: &Value) -> Code {
    Code::from_u64(u64_of(f, "code")).unwrap()
}

fn frame_from_json(f: &Value) -> Frame {
    let flag = |key: &str| f.get(key).and_then(Value::as_bool).unwrap_or(false);
    match f["type"].as_str().unwrap() {
        "SETTINGS" => {
            let d = Settings::DEFAULT;
            let get = |k: &str, dv: u32| f.get(k).map_or(dv, |v| v.as_u64().unwrap() as u32);
            Frame::Settings(Settings {
                max_frame_size: get("max_frame_size", d.max_frame_size),
                max_concurrent_calls: get("max_concurrent_calls", d.max_concurrent_calls),
                initial_credit: get("initial_credit", d.initial_credit),
                max_metadata_size: get("max_metadata_size", d.max_metadata_size),
                max_bound_methods: get("max_bound_methods", d.max_bound_methods),
            })
        }
        "BIND" => Frame::Bind(Bind {
            method: u32_of(f, "method"),
            name: f["name"].as_str().unwrap().to_owned(),
        }),
        "CALL" => Frame::Call(Call {
            call: u32_of(f, "call"),
            method: u32_of(f, "method"),
            end_stream: flag("end_stream"),
            timeout_micros: f.get("timeout_micros").map(|v| v.as_u64().unwrap()),
            metadata: md_of(f, "metadata"),
            message: hex_of(f, "message"),
        }),
        "MESSAGE" => Frame::Message(Message {
            call: u32_of(f, "call"),
            end_stream: flag("end_stream"),
            metadata: md_of(f, "metadata"),
            payload: hex_of(f, "payload").unwrap(),
        }),
        "END" => Frame::End(End {
            call: u32_of(f, "call"),
            code: code_of(f),
            message: f.get("message").map(|m| m.as_str().unwrap().to_owned()),
            details: hex_of(f, "details"),
            trailers: md_of(f, "trailers"),
        }),
        "CANCEL" => Frame::Cancel(Cancel {
            call: u32_of(f, "call"),
            code: code_of(f),
        }),
        "CREDIT" => Frame::Credit(Credit {
            call: u32_of(f, "call"),
            n: u32_of(f, "n"),
        }),
        "PING" => Frame::Ping(Ping {
            ack: flag("ack"),
            payload: hex_of(f, "payload").unwrap()[..].try_into().unwrap(),
        }),
        "GOAWAY" => Frame::GoAway(GoAway {
            last_call_seq: u64_of(f, "last_call_seq"),
            reason: Reason(u32_of(f, "reason")),
            message: f["message"].as_str().unwrap().to_owned(),
        }),
        other => panic!("unknown type {other}"),
    }
}

/// The inverse mapping, so decoded fields are compared as the vector
/// states them (and not only through `PartialEq`).
fn frame_to_json(frame: &Frame) -> Value {
    let mut m = Map::new();
    let md =
        |md: &Metadata| -> Value { md.iter().map(|(k, v)| json!([k, hex::encode(v)])).collect() };
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_owned(), v);
    };
    match frame {
        Frame::Settings(s) => {
            put("type", json!("SETTINGS"));
            let d = Settings::DEFAULT;
            for (k, v, dv) in [
                ("max_frame_size", s.max_frame_size, d.max_frame_size),
                (
                    "max_concurrent_calls",
                    s.max_concurrent_calls,
                    d.max_concurrent_calls,
                ),
                ("initial_credit", s.initial_credit, d.initial_credit),
                (
                    "max_metadata_size",
                    s.max_metadata_size,
                    d.max_metadata_size,
                ),
                (
                    "max_bound_methods",
                    s.max_bound_methods,
                    d.max_bound_methods,
                ),
            ] {
                if v != dv {
                    put(k, json!(v));
                }
            }
        }
        Frame::Bind(b) => {
            put("type", json!("BIND"));
            put("method", json!(b.method));
            put("name", json!(b.name));
        }
        Frame::Call(c) => {
            put("type", json!("CALL"));
            put("call", json!(c.call));
            put("method", json!(c.method));
            if c.end_stream {
                put("end_stream", json!(true));
            }
            if let Some(t) = c.timeout_micros {
                put("timeout_micros", json!(t));
            }
            if let Some(x) = &c.metadata {
                put("metadata", md(x));
            }
            if let Some(x) = &c.message {
                put("message", json!(hex::encode(x)));
            }
        }
        Frame::Message(x) => {
            put("type", json!("MESSAGE"));
            put("call", json!(x.call));
            if x.end_stream {
                put("end_stream", json!(true));
            }
            if let Some(m) = &x.metadata {
                put("metadata", md(m));
            }
            put("payload", json!(hex::encode(&x.payload)));
        }
        Frame::End(e) => {
            put("type", json!("END"));
            put("call", json!(e.call));
            put("code", json!(e.code.as_u8()));
            if let Some(x) = &e.message {
                put("message", json!(x));
            }
            if let Some(x) = &e.details {
                put("details", json!(hex::encode(x)));
            }
            if let Some(x) = &e.trailers {
                put("trailers", md(x));
            }
        }
        Frame::Cancel(c) => {
            put("type", json!("CANCEL"));
            put("call", json!(c.call));
            put("code", json!(c.code.as_u8()));
        }
        Frame::Credit(c) => {
            put("type", json!("CREDIT"));
            put("call", json!(c.call));
            put("n", json!(c.n));
        }
        Frame::Ping(p) => {
            put("type", json!("PING"));
            if p.ack {
                put("ack", json!(true));
            }
            put("payload", json!(hex::encode(p.payload)));
        }
        Frame::GoAway(g) => {
            put("type", json!("GOAWAY"));
            put("last_call_seq", json!(g.last_call_seq));
            put("reason", json!(g.reason.0));
            put("message", json!(g.message));
        }
    }
    Value::Object(m)
}
