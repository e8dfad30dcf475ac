//! The tram wire protocol, sans IO.
//!
//! This crate turns tram frames into bytes and bytes into frames. It has no
//! sockets, no runtime and no clocks: every function is deterministic, which
//! makes it easy to test, fuzz and port. `PROTOCOL.md` at the repository
//! root is the specification; `testdata/vectors/` holds the byte-exact
//! vectors every implementation must agree on.
//!
//! # Layout
//!
//! - [`preface`]: the 8-byte connection preface, and telling tram from
//!   HTTP/2 by a connection's first bytes.
//! - `frame`: [`Frame`] and its nine frame types; encoding into any
//!   [`BufMut`](bytes::BufMut), plus header-only encoders for the hot path
//!   ([`encode_message_header`], [`encode_call_header`]) that let a caller
//!   encode a protobuf message straight after the header with no copy.
//! - `decode`: [`FrameDecoder`], incremental decoding from a read buffer;
//!   `Ok(None)` means "need more bytes". Payloads are slices of the buffer.
//! - `run`: [`FrameDecoder::decode_run`] takes consecutive plain MESSAGE
//!   frames of one call as one [`MessageRun`], whose messages are parsed
//!   as they are taken.
//! - `parse`: one frame's body, validated in place, then split off the
//!   buffer.
//! - [`metadata`]: validated key/value blocks for headers and trailers.
//! - `settings`: [`Settings`], the limits each side announces.
//! - `code`: gRPC's status [`Code`]s and GOAWAY [`Reason`]s.
//! - `error`: [`Error`], one variant per kind of malformed input.
//! - [`varint`]: protobuf-style varints, bounded to 10 bytes.
//!
//! # Example
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use tram_wire::{Frame, FrameDecoder, Message};
//!
//! let mut buf = BytesMut::new();
//! Frame::Message(Message { call: 7, end_stream: true, metadata: None, payload: Bytes::from_static(b"hi") })
//!     .encode(&mut buf);
//! assert_eq!(&buf[..], b"\x31\x03\x07hi");
//!
//! let mut dec = FrameDecoder::new(1 << 20);
//! let frame = dec.decode(&mut buf).unwrap().unwrap();
//! assert!(matches!(frame, Frame::Message(m) if m.call == 7 && &m.payload[..] == b"hi"));
//! assert!(buf.is_empty());
//! ```

mod code;
mod decode;
mod error;
mod frame;
pub mod metadata;
mod parse;
pub mod preface;
mod run;
mod settings;
pub mod varint;

pub use code::{Code, Reason};
pub use decode::{FrameDecoder, Header, decode_exact};
pub use error::Error;
pub use frame::{
    Bind, Call, CallId, Cancel, Credit, End, Frame, FrameType, GoAway, MAX_HEADER_LEN, Message,
    Ping, encode_call_header, encode_call_header_sized, encode_message_header,
    encode_message_header_with_metadata, flags,
};
pub use metadata::Metadata;
pub use run::{MessageRun, Payload};
pub use settings::{
    MAX_CREDIT, MAX_MAX_FRAME_SIZE, MIN_MAX_FRAME_SIZE, Settings, id as setting_id,
};
