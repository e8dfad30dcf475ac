//! Property tests for the gateway's decoders of what HTTP clients send:
//! gRPC's length-prefixed messages, gRPC-Web's base64 bodies, Connect's
//! envelopes, GET queries and timeouts, and metadata headers. Random input
//! never panics and never yields a message over the limit; what the
//! encoders (ours, or the spec's) write decodes back, split anywhere.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use proptest::prelude::*;
use tram::Metadata;

use crate::web::{connect, grpcweb};
use crate::wire::{self, Deframer, Encoding, FrameError};

fn messages() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..8)
}

/// `bytes` cut at `cuts` (positions taken modulo its length, in order).
fn pieces(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    at.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for to in at.into_iter().chain([bytes.len()]) {
        out.push(bytes[from..to].to_vec());
        from = to;
    }
    out
}

/// A Connect envelope as a client writes it.
fn envelope(flags: u8, data: &[u8]) -> Vec<u8> {
    let mut out = vec![flags];
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Messages framed (some gzipped) and fed in arbitrary pieces come out
    /// whole, in order, as soon as each is complete.
    #[test]
    fn grpc_messages_deframe_whatever_the_pieces(
        msgs in messages(),
        gzip in prop::collection::vec(any::<bool>(), 8),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut stream = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            stream.extend_from_slice(&wire::frame(m, gzip[i]));
        }
        let deframer = Deframer::new(4096);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for piece in pieces(&stream, &cuts) {
            buf.extend_from_slice(&piece);
            while let Some(m) = deframer.next(&mut buf, Encoding::Gzip).unwrap() {
                got.push(m.to_vec());
            }
        }
        prop_assert_eq!(got, msgs);
        prop_assert!(buf.is_empty());
    }

    /// Any bytes: each call ends (a message, not enough yet, or a typed
    /// error), no message is over the limit, and "not enough yet" means
    /// that: fewer bytes than the prefix announces.
    #[test]
    fn any_bytes_deframe_or_fail_within_the_limit(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
        max in 0usize..1024,
        gzip in any::<bool>(),
    ) {
        let deframer = Deframer::new(max);
        let encoding = if gzip { Encoding::Gzip } else { Encoding::Identity };
        let mut buf = BytesMut::from(&bytes[..]);
        loop {
            let before = buf.len();
            match deframer.next(&mut buf, encoding) {
                Ok(Some(m)) => {
                    prop_assert!(m.len() <= max);
                    prop_assert!(buf.len() < before, "a message consumes its bytes");
                }
                Ok(None) => {
                    if buf.len() >= 5 {
                        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
                        prop_assert!(len <= max && buf.len() < 5 + len);
                    }
                    break;
                }
                Err(FrameError::TooLarge(n)) => {
                    prop_assert!(n > max);
                    break;
                }
                Err(e) => {
                    // Every error maps to a status, with a message.
                    prop_assert!(!e.status().message().is_empty());
                    break;
                }
            }
        }
    }

    /// A gRPC-Web `-text` body, its messages each in a padded base64 chunk
    /// (as browsers send them), possibly broken over lines, decodes to the
    /// messages one after another.
    #[test]
    fn grpc_web_text_decodes_chunk_by_chunk(
        msgs in messages(),
        newlines in prop::collection::vec(any::<bool>(), 8),
    ) {
        let mut body = String::new();
        for (i, m) in msgs.iter().enumerate() {
            body.push_str(&STANDARD.encode(m));
            if newlines[i] {
                body.push_str("\r\n");
            }
        }
        let decoded = grpcweb::decode_text(body.as_bytes()).unwrap();
        prop_assert_eq!(decoded.to_vec(), msgs.concat());
    }

    /// Any body: decoded or refused with INVALID_ARGUMENT, never more
    /// bytes out than base64 can carry.
    #[test]
    fn any_text_body_decodes_or_is_refused(body in prop::collection::vec(any::<u8>(), 0..512)) {
        match grpcweb::decode_text(&body) {
            Ok(out) => prop_assert!(out.len() <= body.len() / 4 * 3 + 3),
            Err(s) => prop_assert_eq!(s.code(), tram::Code::InvalidArgument),
        }
    }

    /// Connect envelopes (some gzipped) come back as written; an
    /// end-of-stream envelope ends the messages.
    #[test]
    fn connect_envelopes_round_trip(
        msgs in messages(),
        gzip in prop::collection::vec(any::<bool>(), 8),
        end in any::<bool>(),
    ) {
        let mut body = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            if gzip[i] {
                let framed = wire::frame(m, true);
                body.extend_from_slice(&envelope(1, &framed[5..]));
            } else {
                body.extend_from_slice(&envelope(0, m));
            }
        }
        if end {
            body.extend_from_slice(&envelope(2, b"{}"));
            body.extend_from_slice(&envelope(0, b"after the end"));
        }
        let got = connect::envelopes(Bytes::from(body), 4096, true).unwrap();
        let got: Vec<Vec<u8>> = got.iter().map(|m| m.to_vec()).collect();
        prop_assert_eq!(got, msgs);
    }

    /// Any body: envelopes within the limit, or a typed refusal.
    #[test]
    fn any_connect_body_splits_or_is_refused(
        body in prop::collection::vec(any::<u8>(), 0..1024),
        max in 0usize..512,
        gzip in any::<bool>(),
    ) {
        match connect::envelopes(Bytes::from(body), max, gzip) {
            Ok(msgs) => prop_assert!(msgs.iter().all(|m| m.len() <= max)),
            Err(s) => prop_assert!(matches!(
                s.code(),
                tram::Code::InvalidArgument | tram::Code::ResourceExhausted | tram::Code::Internal
            )),
        }
    }

    /// A GET's message comes back from its query, percent-encoded or in
    /// base64url (padded or not); any query parses or is refused.
    #[test]
    fn get_queries_carry_any_message(
        msg in prop::collection::vec(any::<u8>(), 0..200),
        padded in any::<bool>(),
        junk in ".{0,40}",
    ) {
        let b64 = if padded { URL_SAFE.encode(&msg) } else { URL_SAFE_NO_PAD.encode(&msg) };
        let q = connect::get_query(&format!(
            "connect=v1&encoding=proto&base64=1&message={}",
            utf8_percent_encode(&b64, NON_ALPHANUMERIC)
        ))
        .unwrap();
        prop_assert_eq!(q.message.to_vec(), msg.clone());
        prop_assert!(!q.json);
        if let Ok(text) = std::str::from_utf8(&msg) {
            let q = connect::get_query(&format!(
                "encoding=json&message={}",
                utf8_percent_encode(text, NON_ALPHANUMERIC)
            ))
            .unwrap();
            prop_assert_eq!(q.message.to_vec(), msg);
            prop_assert!(q.json);
        }
        let _ = connect::get_query(&junk);
    }

    /// `grpc-timeout`: every value the spec allows parses to its duration;
    /// anything else is no timeout, and nothing panics.
    #[test]
    fn grpc_timeouts_parse_exactly(n in 0u64..100_000_000, unit in 0usize..6, junk in ".{0,12}") {
        let (u, d) = [
            ("H", Duration::from_secs(n * 3600)),
            ("M", Duration::from_secs(n * 60)),
            ("S", Duration::from_secs(n)),
            ("m", Duration::from_millis(n)),
            ("u", Duration::from_micros(n)),
            ("n", Duration::from_nanos(n)),
        ][unit];
        prop_assert_eq!(wire::parse_timeout(&format!("{n}{u}")), Some(d));
        if let Some(t) = wire::parse_timeout(&junk) {
            prop_assert!(junk.len() <= 9 && junk.is_ascii(), "{junk:?} parsed as {t:?}");
        }
    }

    /// `Connect-Timeout-Ms`: up to ten digits are milliseconds, anything
    /// else INVALID_ARGUMENT.
    #[test]
    fn connect_timeouts_parse_or_are_refused(ms in 0u64..10_000_000_000, junk in "[ -~]{0,14}") {
        let mut h = HeaderMap::new();
        h.insert("connect-timeout-ms", HeaderValue::from_str(&ms.to_string()).unwrap());
        prop_assert_eq!(connect::timeout(&h).unwrap(), Some(Duration::from_millis(ms)));
        h.insert("connect-timeout-ms", HeaderValue::from_str(&junk).unwrap());
        match connect::timeout(&h) {
            Ok(t) => prop_assert_eq!(t, Some(Duration::from_millis(junk.parse().unwrap()))),
            Err(s) => prop_assert_eq!(s.code(), tram::Code::InvalidArgument),
        }
    }

    /// Metadata survives the trip to HTTP headers and back: ASCII values
    /// as they are, `-bin` values through base64.
    #[test]
    fn metadata_round_trips_through_headers(
        entries in prop::collection::vec(("[a-z][a-z0-9]{0,8}", any::<bool>(), "[ -~]{0,20}", prop::collection::vec(any::<u8>(), 0..20)), 0..6),
    ) {
        let mut b = Metadata::builder();
        for (i, (name, binary, text, bytes)) in entries.iter().enumerate() {
            // Distinct keys, none of them one gRPC or HTTP reserves.
            let key = format!("x{i}-{name}");
            if *binary {
                b.binary(&format!("{key}-bin"), bytes).unwrap();
            } else {
                b.ascii(&key, text.trim()).unwrap();
            }
        }
        let md = b.build();
        let mut headers = HeaderMap::new();
        wire::metadata_to_headers(&md, &mut headers);
        let back = wire::headers_to_metadata(&headers);
        let mut want: Vec<_> = md.iter().map(|(k, v)| (k.to_owned(), v.to_vec())).collect();
        let mut got: Vec<_> = back.iter().map(|(k, v)| (k.to_owned(), v.to_vec())).collect();
        want.sort();
        got.sort();
        prop_assert_eq!(got, want);
    }
}
