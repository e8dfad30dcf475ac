//! Raw messages with a 4-byte big-endian length prefix.

use crate::conn::WriteBuf;
use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::{DecodeRef, Decoder, Encoder};

/// Raw byte messages, each prefixed by its length as a big-endian `u32`.
///
/// Decoded messages are [`Bytes`] slices of the read buffer: no copy. A
/// length above the maximum is rejected as soon as the prefix arrives.
#[derive(Debug, Clone, Copy)]
pub struct LengthDelimited {
    max_len: usize,
}

/// A length prefix above the maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("message of {len} bytes exceeds the maximum of {max}")]
pub struct LengthError {
    /// The length announced or attempted.
    pub len: usize,
    /// The codec's maximum.
    pub max: usize,
}

impl LengthDelimited {
    /// The default maximum message size: 4 MiB.
    pub const DEFAULT_MAX_LEN: usize = 4 << 20;

    /// A codec with the default maximum.
    pub fn new() -> Self {
        LengthDelimited {
            max_len: Self::DEFAULT_MAX_LEN,
        }
    }

    /// A codec that rejects messages over `max_len` bytes (capped at
    /// `u32::MAX`).
    pub fn with_max_len(max_len: usize) -> Self {
        LengthDelimited {
            max_len: max_len.min(u32::MAX as usize),
        }
    }
}

impl Default for LengthDelimited {
    fn default() -> Self {
        LengthDelimited::new()
    }
}

impl LengthDelimited {
    /// The payload length of the message at the front of `src`, once the
    /// whole message is there.
    #[inline]
    fn complete(&self, src: &[u8]) -> Result<Option<usize>, LengthError> {
        let Some(prefix) = src.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*prefix) as usize;
        if len > self.max_len {
            return Err(LengthError {
                len,
                max: self.max_len,
            });
        }
        Ok((src.len() >= 4 + len).then_some(len))
    }
}

impl Decoder for LengthDelimited {
    type Item = Bytes;
    type Error = LengthError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, LengthError> {
        let Some(len) = self.complete(src)? else {
            return Ok(None);
        };
        // Split prefix and payload off together, then skip the prefix on the
        // frozen handle: a pointer bump, cheaper than advancing the
        // shared read buffer first.
        let mut msg = src.split_to(4 + len).freeze();
        msg.advance(4);
        Ok(Some(msg))
    }

    fn frame_len(&self, src: &[u8]) -> Option<usize> {
        let prefix = src.first_chunk::<4>()?;
        let len = u32::from_be_bytes(*prefix) as usize;
        (len <= self.max_len).then_some(4 + len)
    }
}

impl DecodeRef for LengthDelimited {
    type Ref<'a> = &'a [u8];

    #[inline]
    fn decode_ref<'a>(&mut self, src: &'a [u8]) -> Result<Option<(&'a [u8], usize)>, LengthError> {
        Ok(self.complete(src)?.map(|len| (&src[4..4 + len], 4 + len)))
    }
}

impl<T: AsRef<[u8]>> Encoder<T> for LengthDelimited {
    type Error = LengthError;

    fn encode(&mut self, item: T, dst: &mut WriteBuf) -> Result<(), LengthError> {
        let msg = item.as_ref();
        if msg.len() > self.max_len {
            return Err(LengthError {
                len: msg.len(),
                max: self.max_len,
            });
        }
        dst.reserve(4 + msg.len());
        dst.put_u32(msg.len() as u32);
        dst.put_slice(msg);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_limits() {
        let mut c = LengthDelimited::with_max_len(8);
        let mut out = WriteBuf::default();
        c.encode(b"hello", &mut out).unwrap();
        c.encode(Bytes::new(), &mut out).unwrap();
        assert_eq!(out.contiguous(), b"\0\0\0\x05hello\0\0\0\0");
        assert!(c.encode(b"123456789", &mut out).is_err());
        assert_eq!(out.len(), 13, "a failed encode appends nothing");
        let mut buf = BytesMut::from(out.contiguous());
        assert_eq!(c.decode(&mut buf).unwrap().unwrap(), &b"hello"[..]);
        assert_eq!(c.decode(&mut buf).unwrap().unwrap(), &b""[..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);

        let mut partial = BytesMut::from(&b"\0\0\0\x03ab"[..]);
        assert_eq!(c.decode(&mut partial).unwrap(), None);
        let mut garbage = BytesMut::from(&[0xff; 64][..]);
        assert_eq!(
            c.decode(&mut garbage),
            Err(LengthError {
                len: u32::MAX as usize,
                max: 8
            })
        );
    }
}
