//! Codecs: how messages become bytes and back.
//!
//! A codec is a [`Decoder`] for what arrives and an [`Encoder`] for what is
//! sent. Decoders follow the tram-wire convention: `Ok(None)` means "not a
//! whole message yet", an error means the bytes can never become one (the
//! connection is then closed). The connection also enforces its own bound on
//! bytes buffered for one message, so a decoder that waits forever cannot
//! make it grow without limit.
//!
//! Shipped codecs: [`LengthDelimited`] (raw bytes with a 4-byte length),
//! [`ProstCodec`] (length-delimited protobuf),
//! [`JsonLines`] (newline-separated JSON, feature `json`), and
//! [`FrameCodec`] (tram protocol frames).

use bytes::BytesMut;

mod frame;
#[cfg(feature = "json")]
mod json;
mod length;
mod prost;

pub use frame::FrameCodec;
#[cfg(feature = "json")]
pub use json::{JsonError, JsonLines};
pub use length::{LengthDelimited, LengthError};
pub use prost::{ProstCodec, ProstError};

/// Turns the front of a read buffer into messages.
pub trait Decoder {
    /// The decoded message.
    type Item;
    /// Why bytes were rejected.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Decodes one message from the front of `src`, removing its bytes.
    /// A message takes at least one byte: the connection does not call
    /// this while `src` is empty.
    ///
    /// # Errors
    ///
    /// When the bytes can never form a valid message; the connection is
    /// closed.
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error>;

    /// The whole length in bytes of the message `src` begins with, if its
    /// length is already known (its prefix read) though not all of it is
    /// there. The connection uses it only to leave room for messages that
    /// large before it reads on, so that such a message is not read
    /// across the end of its buffer and copied to the next; it never sizes
    /// an allocation. `None` (the default) when unknown.
    fn frame_len(&self, src: &[u8]) -> Option<usize> {
        let _ = src;
        None
    }
}

/// A decoder that can also parse a message in place, borrowed from the
/// read buffer, for [`Inbound::recv_with`](crate::conn::Inbound::recv_with):
/// no copy, no allocation and no reference count per message.
pub trait DecodeRef: Decoder {
    /// A message borrowed from the buffer.
    type Ref<'a>;

    /// Parses the message at the front of `src` without consuming it,
    /// returning it and the number of bytes it spans.
    ///
    /// # Errors
    ///
    /// As [`Decoder::decode`].
    fn decode_ref<'a>(
        &mut self,
        src: &'a [u8],
    ) -> Result<Option<(Self::Ref<'a>, usize)>, Self::Error>;
}

/// Appends messages to a write buffer.
pub trait Encoder<Item> {
    /// Why a message could not be encoded.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Appends `item` to `dst`, a [`BufMut`](bytes::BufMut): a large
    /// `Bytes` put into it is written by reference, without a copy
    /// ([`WriteBuf`](super::WriteBuf)). On error, whatever the encoder
    /// appended is dropped.
    ///
    /// # Errors
    ///
    /// When `item` cannot be encoded (for example it exceeds a size limit).
    fn encode(&mut self, item: Item, dst: &mut super::WriteBuf) -> Result<(), Self::Error>;
}
