//! Length-delimited protobuf messages (prost).

use crate::conn::WriteBuf;
use std::marker::PhantomData;

use bytes::{Buf, BufMut, BytesMut};

use super::{Decoder, Encoder};

/// Protobuf messages, each prefixed by its length as a varint: the format of
/// prost's `encode_length_delimited`, Java's `writeDelimitedTo` and Go's
/// `protodelim`.
///
/// Decodes `In` and encodes `Out`; `bytes` fields generated as
/// [`bytes::Bytes`] are slices of the read buffer (no copy). Messages are
/// encoded straight into the write buffer.
pub struct ProstCodec<In, Out = In> {
    max_len: usize,
    _types: PhantomData<fn(Out) -> In>,
}

/// A protobuf message that could not be decoded or encoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProstError {
    /// The length prefix exceeds the maximum.
    #[error("message of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The length announced or attempted.
        len: u64,
        /// The codec's maximum.
        max: usize,
    },
    /// The length prefix is not a valid varint.
    #[error("invalid length prefix")]
    BadLength,
    /// The message bytes are not a valid protobuf message.
    #[error(transparent)]
    Decode(#[from] prost::DecodeError),
}

impl<In, Out> ProstCodec<In, Out> {
    /// The default maximum message size: 4 MiB.
    pub const DEFAULT_MAX_LEN: usize = 4 << 20;

    /// A codec with the default maximum.
    pub fn new() -> Self {
        Self::with_max_len(Self::DEFAULT_MAX_LEN)
    }

    /// A codec that rejects messages over `max_len` bytes.
    pub fn with_max_len(max_len: usize) -> Self {
        ProstCodec {
            max_len,
            _types: PhantomData,
        }
    }
}

impl<In, Out> Default for ProstCodec<In, Out> {
    fn default() -> Self {
        Self::new()
    }
}

impl<In, Out> Clone for ProstCodec<In, Out> {
    fn clone(&self) -> Self {
        Self::with_max_len(self.max_len)
    }
}

impl<In, Out> std::fmt::Debug for ProstCodec<In, Out> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProstCodec")
            .field("max_len", &self.max_len)
            .finish()
    }
}

impl<In: prost::Message + Default, Out> Decoder for ProstCodec<In, Out> {
    type Item = In;
    type Error = ProstError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, ProstError> {
        let (len, n) = match tram_wire::varint::decode(src) {
            Ok(Some(v)) => v,
            Ok(None) => return Ok(None),
            Err(_) => return Err(ProstError::BadLength),
        };
        if len > self.max_len as u64 {
            return Err(ProstError::TooLarge {
                len,
                max: self.max_len,
            });
        }
        let len = len as usize;
        if src.len() < n + len {
            return Ok(None);
        }
        let mut body = src.split_to(n + len).freeze();
        body.advance(n);
        Ok(Some(In::decode(body)?))
    }

    fn frame_len(&self, src: &[u8]) -> Option<usize> {
        match tram_wire::varint::decode(src) {
            Ok(Some((len, n))) if len <= self.max_len as u64 => Some(n + len as usize),
            _ => None,
        }
    }
}

impl<In, Out: prost::Message> Encoder<Out> for ProstCodec<In, Out> {
    type Error = ProstError;

    fn encode(&mut self, item: Out, dst: &mut WriteBuf) -> Result<(), ProstError> {
        let len = item.encoded_len();
        if len > self.max_len {
            return Err(ProstError::TooLarge {
                len: len as u64,
                max: self.max_len,
            });
        }
        dst.reserve(tram_wire::varint::encoded_len(len as u64) + len);
        tram_wire::varint::put(dst, len as u64);
        // Cannot fail: the buffer was reserved for the encoded length.
        item.encode_raw(dst);
        debug_assert!(dst.remaining_mut() > 0);
        Ok(())
    }
}
