//! gRPC-Web (github.com/grpc/grpc/blob/master/doc/PROTOCOL-WEB.md): gRPC's
//! framing in an HTTP/1.1 or HTTP/2 body that browsers can make, the
//! status and trailers in a last frame (flag 0x80) instead of HTTP
//! trailers, and `-text` bodies in base64.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderMap;
use tram::Status;

/// The frame that ends a gRPC-Web response: `grpc-status`, `grpc-message`
/// and the trailers, as an HTTP/1 header block.
pub(crate) fn trailer_frame(status: &Status) -> Bytes {
    let mut headers = HeaderMap::new();
    crate::wire::status_headers(status, &mut headers);
    let mut block = Vec::new();
    for (name, value) in &headers {
        block.extend_from_slice(name.as_str().as_bytes());
        block.extend_from_slice(b": ");
        block.extend_from_slice(value.as_bytes());
        block.extend_from_slice(b"\r\n");
    }
    let mut out = BytesMut::with_capacity(5 + block.len());
    out.put_u8(0x80);
    out.put_u32(block.len() as u32);
    out.put_slice(&block);
    out.freeze()
}

/// A `-text` request body, decoded: base64, possibly in padded chunks
/// one after another.
pub(crate) fn decode_text(body: &[u8]) -> Result<Bytes, Status> {
    let mut out = Vec::with_capacity(body.len() / 4 * 3);
    let clean: Vec<u8> = body
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    // Each padded chunk decodes alone; split after every run of '='.
    let mut start = 0;
    let mut i = 0;
    while i < clean.len() {
        if clean[i] == b'=' {
            while i < clean.len() && clean[i] == b'=' {
                i += 1;
            }
            decode_into(&clean[start..i], &mut out)?;
            start = i;
        } else {
            i += 1;
        }
    }
    decode_into(&clean[start..], &mut out)?;
    Ok(out.into())
}

fn decode_into(chunk: &[u8], out: &mut Vec<u8>) -> Result<(), Status> {
    if chunk.is_empty() {
        return Ok(());
    }
    let decoded = STANDARD
        .decode(chunk)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(chunk))
        .map_err(|e| Status::invalid_argument(format!("grpc-web-text body is not base64: {e}")))?;
    out.extend_from_slice(&decoded);
    Ok(())
}

/// A piece of a `-text` response: base64, padded (clients decode the
/// pieces one after another).
pub(crate) fn encode_text(chunk: &[u8]) -> Bytes {
    STANDARD.encode(chunk).into()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_trailer_frame_holds_the_status_as_header_lines() {
        let f = trailer_frame(&Status::not_found("no"));
        assert_eq!(f[0], 0x80);
        let text = std::str::from_utf8(&f[5..]).unwrap();
        assert!(text.contains("grpc-status: 5\r\n"), "{text}");
        assert!(text.contains("grpc-message: no\r\n"), "{text}");
    }

    #[test]
    fn text_bodies_decode_in_padded_chunks() {
        let a = STANDARD.encode(b"\x00\x00\x00\x00\x01x");
        let b = STANDARD.encode(b"yz");
        let joined = format!("{a}{b}");
        assert_eq!(
            &decode_text(joined.as_bytes()).unwrap()[..],
            b"\x00\x00\x00\x00\x01xyz"
        );
        assert!(decode_text(b"!!!").is_err());
    }
}
