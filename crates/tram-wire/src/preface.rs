//! The connection preface, and telling tram from HTTP/2 by the first bytes.
//!
//! Both sides start with the 8-byte [`PREFACE`] followed by a SETTINGS frame.
//! Its first byte, `0x89`, is not ASCII, so it cannot be the start of
//! HTTP/2's `PRI * HTTP/2.0` preface, an HTTP/1 request line or a TLS record
//! (`0x16`); a server serving several protocols on one port tells them apart
//! by the first byte.

use crate::Error;

/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;

/// The bytes each side sends first: `0x89 "TRAM" "\r\n"` and the version.
pub const PREFACE: [u8; 8] = [0x89, b'T', b'R', b'A', b'M', b'\r', b'\n', VERSION];

/// The client preface of HTTP/2 (RFC 9113 §3.4).
pub const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Checks the preface at the front of `src`.
///
/// Returns `Ok(None)` while the bytes so far are a prefix of a valid preface,
/// and `Ok(Some(len))` with the preface's length once it is complete.
///
/// # Errors
///
/// [`Error::BadPreface`] as soon as a byte differs from the magic, and
/// [`Error::UnsupportedVersion`] for another version.
pub fn check(src: &[u8]) -> Result<Option<usize>, Error> {
    let magic = &PREFACE[..7];
    let n = src.len().min(magic.len());
    if src[..n] != magic[..n] {
        return Err(Error::BadPreface);
    }
    match src.get(7) {
        None => Ok(None),
        Some(&VERSION) => Ok(Some(PREFACE.len())),
        Some(&other) => Err(Error::UnsupportedVersion(other)),
    }
}

/// What a connection's first bytes say it speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The tram preface (any version).
    Tram,
    /// The HTTP/2 client preface (prior knowledge, as gRPC clients send).
    Http2,
    /// Neither.
    Unknown,
}

/// Tells the protocol from the first bytes of a connection.
///
/// Returns `None` while more bytes are needed to decide. One byte settles
/// it for anything but HTTP/2, which is confirmed on its whole 24-byte
/// preface.
pub fn detect(src: &[u8]) -> Option<Protocol> {
    let first = *src.first()?;
    if first == PREFACE[0] {
        return Some(Protocol::Tram);
    }
    let n = src.len().min(HTTP2_PREFACE.len());
    if src[..n] != HTTP2_PREFACE[..n] {
        return Some(Protocol::Unknown);
    }
    (n == HTTP2_PREFACE.len()).then_some(Protocol::Http2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preface_checks_incrementally() {
        for i in 0..PREFACE.len() {
            assert_eq!(check(&PREFACE[..i]), Ok(None), "prefix of {i}");
        }
        assert_eq!(check(&PREFACE), Ok(Some(8)));
        let mut v = PREFACE.to_vec();
        v.extend_from_slice(b"more");
        assert_eq!(check(&v), Ok(Some(8)));
        v[7] = 2;
        assert_eq!(check(&v), Err(Error::UnsupportedVersion(2)));
        assert_eq!(check(b"\x89TX"), Err(Error::BadPreface));
        assert_eq!(check(&[0xff; 64]), Err(Error::BadPreface));
        assert_eq!(check(HTTP2_PREFACE), Err(Error::BadPreface));
    }

    #[test]
    fn detects_protocols() {
        assert_eq!(detect(&[]), None);
        assert_eq!(detect(&PREFACE[..1]), Some(Protocol::Tram));
        assert_eq!(detect(b"PRI * HTTP"), None);
        assert_eq!(detect(HTTP2_PREFACE), Some(Protocol::Http2));
        assert_eq!(detect(b"GET / HTTP/1.1\r\n"), Some(Protocol::Unknown));
        assert_eq!(detect(&[0x16, 0x03, 0x01]), Some(Protocol::Unknown));
        assert_eq!(detect(b"PRX"), Some(Protocol::Unknown));
    }
}
