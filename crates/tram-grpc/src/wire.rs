//! gRPC-over-HTTP/2 details that need no I/O: the 5-byte message prefix,
//! compression, `grpc-timeout`, metadata headers and status trailers.

use std::io::{Read, Write};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use tram::rpc::{Code, Metadata, Status};

/// A message encoding the gateway speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    Identity,
    Gzip,
}

impl Encoding {
    /// From a `grpc-encoding` value; `None` for one we do not support.
    pub(crate) fn parse(v: &str) -> Option<Encoding> {
        match v.trim() {
            "identity" => Some(Encoding::Identity),
            "gzip" => Some(Encoding::Gzip),
            _ => None,
        }
    }
}

/// What goes in `grpc-accept-encoding`.
pub(crate) const ACCEPT_ENCODING: &str = "gzip,identity";

/// Splits complete length-prefixed messages off the front of `buf`.
#[derive(Debug)]
pub(crate) struct Deframer {
    max: usize,
}

/// A message that could not be taken from the stream.
#[derive(Debug)]
pub(crate) enum FrameError {
    TooLarge(usize),
    Compressed,
    Decompress(std::io::Error),
}

impl FrameError {
    pub(crate) fn status(&self) -> Status {
        match self {
            FrameError::TooLarge(n) => {
                Status::resource_exhausted(format!("message of {n} bytes is over the limit"))
            }
            FrameError::Compressed => {
                Status::internal("compressed message without a grpc-encoding")
            }
            FrameError::Decompress(e) => {
                Status::internal(format!("message does not decompress: {e}"))
            }
        }
    }
}

impl Deframer {
    pub(crate) fn new(max: usize) -> Deframer {
        Deframer { max }
    }

    /// The next complete message, decompressed; `Ok(None)` when `buf`
    /// holds less than one.
    pub(crate) fn next(
        &self,
        buf: &mut BytesMut,
        encoding: Encoding,
    ) -> Result<Option<Bytes>, FrameError> {
        if buf.len() < 5 {
            return Ok(None);
        }
        let compressed = buf[0] == 1;
        let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
        if len > self.max {
            return Err(FrameError::TooLarge(len));
        }
        if buf.len() < 5 + len {
            buf.reserve(5 + len - buf.len());
            return Ok(None);
        }
        buf.advance(5);
        let body = buf.split_to(len).freeze();
        if !compressed {
            return Ok(Some(body));
        }
        match encoding {
            Encoding::Identity => Err(FrameError::Compressed),
            Encoding::Gzip => {
                let mut out = Vec::new();
                // Bounded: a small compressed message must not expand
                // past the limit (a zip bomb).
                flate2::read::GzDecoder::new(&body[..])
                    .take(self.max as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(FrameError::Decompress)?;
                if out.len() > self.max {
                    return Err(FrameError::TooLarge(out.len()));
                }
                Ok(Some(Bytes::from(out)))
            }
        }
    }
}

/// Prefixes `msg` (compressing it with gzip if `gzip`).
pub(crate) fn frame(msg: &[u8], gzip: bool) -> Bytes {
    if gzip {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        if enc.write_all(msg).is_ok() {
            if let Ok(z) = enc.finish() {
                let mut out = BytesMut::with_capacity(5 + z.len());
                out.put_u8(1);
                out.put_u32(z.len() as u32);
                out.put_slice(&z);
                return out.freeze();
            }
        }
    }
    let mut out = BytesMut::with_capacity(5 + msg.len());
    out.put_u8(0);
    out.put_u32(msg.len() as u32);
    out.put_slice(msg);
    out.freeze()
}

/// Parses `grpc-timeout`: up to 8 digits and a unit (H M S m u n).
pub(crate) fn parse_timeout(v: &str) -> Option<Duration> {
    // By bytes: the unit is one ASCII byte, whatever the value holds.
    let (&unit, digits) = v.as_bytes().split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Whether a request header is gRPC's or HTTP's own rather than metadata.
fn reserved(name: &str) -> bool {
    name.starts_with(':')
        || name.starts_with("grpc-")
        || name.starts_with("connect-")
        || name.starts_with("access-control-")
        || matches!(
            name,
            "content-type"
                | "te"
                | "user-agent"
                | "host"
                | "content-length"
                | "accept-encoding"
                | "content-encoding"
                | "accept"
                | "origin"
                | "connection"
                | "keep-alive"
                | "upgrade"
                | "transfer-encoding"
                | "x-grpc-web"
                | "x-user-agent"
        )
}

/// The request headers that are metadata, as a tram block: `-bin` values
/// base64-decoded (padded or not). Entries tram cannot carry are dropped.
pub(crate) fn headers_to_metadata(headers: &HeaderMap) -> Metadata {
    let mut md = Metadata::builder();
    for (name, value) in headers {
        let name = name.as_str();
        if reserved(name) {
            continue;
        }
        if name.ends_with("-bin") {
            let v = value.as_bytes();
            let decoded =
                STANDARD_NO_PAD.decode(v.strip_suffix(b"==").or(v.strip_suffix(b"=")).unwrap_or(v));
            if let Ok(bytes) = decoded {
                let _ = md.binary(name, &bytes);
            }
        } else if let Ok(v) = value.to_str() {
            let _ = md.ascii(name, v);
        }
    }
    md.build()
}

/// Adds a tram metadata block to HTTP headers (or trailers).
pub(crate) fn metadata_to_headers(md: &Metadata, headers: &mut HeaderMap) {
    for (key, value) in md.iter() {
        let Ok(name) = HeaderName::from_bytes(key.as_bytes()) else {
            continue;
        };
        let value = if key.ends_with("-bin") {
            HeaderValue::from_str(&STANDARD_NO_PAD.encode(value))
        } else {
            HeaderValue::from_bytes(value)
        };
        if let Ok(v) = value {
            headers.append(name, v);
        }
    }
}

/// `grpc-message` is percent-encoded: everything outside printable ASCII,
/// and `%` itself.
const MESSAGE_ESCAPES: &AsciiSet = &CONTROLS.add(b'%');

/// The trailers (or trailers-only headers) that carry `status`.
pub(crate) fn status_headers(status: &Status, headers: &mut HeaderMap) {
    headers.insert("grpc-status", HeaderValue::from(status.code() as u16));
    if !status.message().is_empty() {
        let encoded = utf8_percent_encode(status.message(), MESSAGE_ESCAPES).to_string();
        if let Ok(v) = HeaderValue::from_str(&encoded) {
            headers.insert("grpc-message", v);
        }
    }
    if !status.details().is_empty() {
        if let Ok(v) = HeaderValue::from_str(&STANDARD.encode(status.details())) {
            headers.insert("grpc-status-details-bin", v);
        }
    }
    metadata_to_headers(status.trailers(), headers);
}

/// Decodes a `grpc-message` value (used by the tests' own checks).
pub fn decode_message(v: &str) -> String {
    percent_decode_str(v).decode_utf8_lossy().into_owned()
}

/// OK, with the response's trailers.
pub(crate) fn ok_status(trailers: Metadata) -> Status {
    Status::new(Code::Ok, "").with_trailers(trailers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_per_the_spec() {
        assert_eq!(parse_timeout("1S"), Some(Duration::from_secs(1)));
        assert_eq!(parse_timeout("250m"), Some(Duration::from_millis(250)));
        assert_eq!(parse_timeout("3H"), Some(Duration::from_secs(3 * 3600)));
        assert_eq!(
            parse_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        assert_eq!(parse_timeout("123456789S"), None, "at most 8 digits");
        assert_eq!(parse_timeout("S"), None);
        assert_eq!(parse_timeout("10x"), None);
        assert_eq!(parse_timeout(""), None);
        assert_eq!(parse_timeout("1é"), None, "not ASCII: no timeout, no panic");
    }

    #[test]
    fn messages_deframe_in_pieces_and_compressed() {
        let d = Deframer::new(1024);
        let mut buf = BytesMut::new();
        let one = frame(b"hello", false);
        let two = frame(&[7u8; 300], true);
        buf.extend_from_slice(&one[..3]);
        assert!(d.next(&mut buf, Encoding::Gzip).unwrap().is_none());
        buf.extend_from_slice(&one[3..]);
        buf.extend_from_slice(&two);
        assert_eq!(
            &d.next(&mut buf, Encoding::Gzip).unwrap().unwrap()[..],
            b"hello"
        );
        assert_eq!(
            &d.next(&mut buf, Encoding::Gzip).unwrap().unwrap()[..],
            &[7u8; 300][..]
        );
        assert!(buf.is_empty());
        // Compressed without an encoding, too large, a zip bomb.
        let mut buf = BytesMut::from(&frame(b"x", true)[..]);
        assert!(matches!(
            d.next(&mut buf, Encoding::Identity),
            Err(FrameError::Compressed)
        ));
        let mut buf = BytesMut::from(&frame(&[0u8; 2000], false)[..]);
        assert!(matches!(
            d.next(&mut buf, Encoding::Identity),
            Err(FrameError::TooLarge(2000))
        ));
        let mut buf = BytesMut::from(&frame(&[0u8; 100_000], true)[..]);
        assert!(matches!(
            d.next(&mut buf, Encoding::Gzip),
            Err(FrameError::TooLarge(_))
        ));
    }

    #[test]
    fn metadata_round_trips_through_headers() {
        let md = Metadata::builder()
            .ascii("x-user", "ada")
            .unwrap()
            .binary("x-blob-bin", &[0, 1, 2, 255])
            .unwrap()
            .build();
        let mut headers = HeaderMap::new();
        metadata_to_headers(&md, &mut headers);
        headers.insert("content-type", HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-timeout", HeaderValue::from_static("1S"));
        let back = headers_to_metadata(&headers);
        assert_eq!(back.get("x-user"), Some(&b"ada"[..]));
        assert_eq!(back.get("x-blob-bin"), Some(&[0u8, 1, 2, 255][..]));
        assert!(back.get("content-type").is_none());
        assert!(back.get("grpc-timeout").is_none());
        // Padded base64 is accepted too.
        let mut headers = HeaderMap::new();
        headers.insert("k-bin", HeaderValue::from_static("AAE="));
        assert_eq!(
            headers_to_metadata(&headers).get("k-bin"),
            Some(&[0u8, 1][..])
        );
    }

    #[test]
    fn status_messages_are_percent_encoded() {
        let s = Status::new(
            Code::Unknown,
            "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n",
        );
        let mut headers = HeaderMap::new();
        status_headers(&s, &mut headers);
        assert_eq!(headers["grpc-status"], "2");
        let m = headers["grpc-message"].to_str().unwrap();
        assert!(m.is_ascii());
        assert_eq!(decode_message(m), s.message());
    }
}
