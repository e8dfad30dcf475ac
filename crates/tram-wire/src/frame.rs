//! Frame types and their encoding.
//!
//! Every frame is `type_flags: u8, body_len: varint, body`. The high nibble
//! of the first byte is the [`FrameType`], the low nibble its flags. Encoding
//! writes straight into the caller's buffer: no allocation per frame beyond
//! what the buffer itself needs to grow.

use std::time::Duration;

use bytes::{BufMut, Bytes};

use crate::{Code, Metadata, Reason, Settings, varint};

/// A call's identifier on its connection, chosen by the client.
pub type CallId = u32;

/// The type nibble of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameType {
    /// Limits, sent once by each side after the preface.
    Settings = 0x0,
    /// Binds a method name to a small number for this connection.
    Bind = 0x1,
    /// Opens a call.
    Call = 0x2,
    /// One message of a call.
    Message = 0x3,
    /// Ends a call direction; from the server, with the call's status.
    End = 0x4,
    /// The client abandons a call.
    Cancel = 0x5,
    /// Grants the peer permission to send more messages on a call.
    Credit = 0x6,
    /// Liveness probe and its acknowledgement.
    Ping = 0x7,
    /// The sender is closing the connection.
    GoAway = 0x8,
}

impl FrameType {
    /// The frame type with this nibble.
    pub fn from_u8(n: u8) -> Option<FrameType> {
        Some(match n {
            0x0 => FrameType::Settings,
            0x1 => FrameType::Bind,
            0x2 => FrameType::Call,
            0x3 => FrameType::Message,
            0x4 => FrameType::End,
            0x5 => FrameType::Cancel,
            0x6 => FrameType::Credit,
            0x7 => FrameType::Ping,
            0x8 => FrameType::GoAway,
            _ => return None,
        })
    }

    /// The flags this frame type defines; any other bit is a protocol error.
    pub(crate) fn allowed_flags(self) -> u8 {
        match self {
            FrameType::Call => 0xf,
            FrameType::Message => flags::END_STREAM | flags::MESSAGE_METADATA,
            FrameType::End => flags::END_MESSAGE | flags::END_DETAILS | flags::END_TRAILERS,
            FrameType::Ping => flags::ACK,
            _ => 0,
        }
    }
}

/// Flag bits, by the frame types that define them.
pub mod flags {
    /// CALL, MESSAGE: the sender sends nothing more on this call.
    pub const END_STREAM: u8 = 0x1;
    /// CALL: the body ends with the first request message.
    pub const CALL_MESSAGE: u8 = 0x2;
    /// CALL: a timeout in microseconds follows the method id.
    pub const CALL_DEADLINE: u8 = 0x4;
    /// CALL: a metadata block follows.
    pub const CALL_METADATA: u8 = 0x8;
    /// MESSAGE (the server's first on a call): the response's leading
    /// metadata (headers) precedes the message.
    pub const MESSAGE_METADATA: u8 = 0x2;
    /// END: a status message follows the code.
    pub const END_MESSAGE: u8 = 0x1;
    /// END: status details follow.
    pub const END_DETAILS: u8 = 0x2;
    /// END: a trailing metadata block follows.
    pub const END_TRAILERS: u8 = 0x4;
    /// PING: this is the acknowledgement of a ping.
    pub const ACK: u8 = 0x1;
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// See [`Settings`].
    Settings(Settings),
    /// See [`Bind`].
    Bind(Bind),
    /// See [`Call`].
    Call(Call),
    /// See [`Message`].
    Message(Message),
    /// See [`End`].
    End(End),
    /// See [`Cancel`].
    Cancel(Cancel),
    /// See [`Credit`].
    Credit(Credit),
    /// See [`Ping`].
    Ping(Ping),
    /// See [`GoAway`].
    GoAway(GoAway),
}

/// BIND: from now on, `method` stands for `name` on this connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The number CALL frames will use.
    pub method: u32,
    /// The full method name, `/package.Service/Method`.
    pub name: String,
}

/// CALL: opens call `call` on method `method`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Call {
    /// The new call's id; must not be in use.
    pub call: CallId,
    /// A method number bound earlier by BIND.
    pub method: u32,
    /// The client sends nothing more (a unary or server-streaming request).
    pub end_stream: bool,
    /// Time the caller allows, in microseconds, from when it sent the call.
    pub timeout_micros: Option<u64>,
    /// Request metadata (headers).
    pub metadata: Option<Metadata>,
    /// The first request message, if it travels with the call.
    pub message: Option<Bytes>,
}

impl Call {
    /// The body length of this CALL frame carrying a message of
    /// `message_len` bytes (`None`: no message); `self.message` is ignored.
    pub fn body_len(&self, message_len: Option<usize>) -> usize {
        call_body_len(self, message_len)
    }

    /// The timeout as a duration.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout_micros.map(Duration::from_micros)
    }
}

/// MESSAGE: one message of call `call`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The call it belongs to.
    pub call: CallId,
    /// The last message in this direction. From the server this also ends
    /// the call with status OK and no trailers (the unary fast path).
    pub end_stream: bool,
    /// The response's leading metadata (headers): only on the server's
    /// first MESSAGE of a call.
    pub metadata: Option<Metadata>,
    /// The encoded message.
    pub payload: Bytes,
}

/// END: the sender's direction of call `call` is finished.
///
/// From the server it carries the call's final status. From the client it
/// is a half-close and must carry [`Code::Ok`] with nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// The call it ends.
    pub call: CallId,
    /// The status code.
    pub code: Code,
    /// A human-readable status message.
    pub message: Option<String>,
    /// Opaque status details (gRPC puts a `google.rpc.Status` here).
    pub details: Option<Bytes>,
    /// Trailing metadata.
    pub trailers: Option<Metadata>,
}

impl End {
    /// An END with just a code.
    pub fn new(call: CallId, code: Code) -> End {
        End {
            call,
            code,
            message: None,
            details: None,
            trailers: None,
        }
    }
}

/// CANCEL: the client abandons call `call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancel {
    /// The call to cancel.
    pub call: CallId,
    /// Why: usually [`Code::Cancelled`], or [`Code::DeadlineExceeded`]
    /// when the client's deadline fired.
    pub code: Code,
}

/// CREDIT: the peer may send `n` more messages on call `call`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credit {
    /// The call.
    pub call: CallId,
    /// Additional messages allowed (1..=2^31-1).
    pub n: u32,
}

/// PING: liveness probe; the receiver answers with the same payload and
/// `ack` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ping {
    /// This is the answer to a ping.
    pub ack: bool,
    /// Opaque; echoed back.
    pub payload: [u8; 8],
}

impl Ping {
    /// The answer a receiver must send: the same payload with `ack` set, or
    /// `None` if this is itself an answer.
    pub fn reply(self) -> Option<Ping> {
        (!self.ack).then_some(Ping {
            ack: true,
            payload: self.payload,
        })
    }
}

/// GOAWAY: the sender is closing the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// How many CALL frames the sender accepted on this connection. Calls
    /// the client sent after that many were not and will not be processed,
    /// so they are safe to retry elsewhere.
    pub last_call_seq: u64,
    /// Why.
    pub reason: Reason,
    /// Text for logs.
    pub message: String,
}

/// The largest frame header: one type byte and a length varint up to a
/// 1 GiB frame (5 bytes).
pub const MAX_HEADER_LEN: usize = 1 + 5;

impl Frame {
    /// The frame's type.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Frame::Settings(_) => FrameType::Settings,
            Frame::Bind(_) => FrameType::Bind,
            Frame::Call(_) => FrameType::Call,
            Frame::Message(_) => FrameType::Message,
            Frame::End(_) => FrameType::End,
            Frame::Cancel(_) => FrameType::Cancel,
            Frame::Credit(_) => FrameType::Credit,
            Frame::Ping(_) => FrameType::Ping,
            Frame::GoAway(_) => FrameType::GoAway,
        }
    }

    /// The number of bytes [`Frame::encode`] appends.
    pub fn encoded_len(&self) -> usize {
        let body = self.body_len();
        1 + varint::encoded_len(body as u64) + body
    }

    /// Appends the frame's encoding to `dst`.
    pub fn encode<B: BufMut + ?Sized>(&self, dst: &mut B) {
        match self {
            Frame::Settings(s) => {
                put_header(dst, FrameType::Settings, 0, s.body_len());
                s.encode_body(dst);
            }
            Frame::Bind(b) => {
                put_header(dst, FrameType::Bind, 0, self.body_len());
                varint::put(dst, u64::from(b.method));
                dst.put_slice(b.name.as_bytes());
            }
            Frame::Call(c) => {
                let message = c.message.as_deref();
                encode_call_header(dst, c, message.map(<[u8]>::len));
                if let Some(m) = message {
                    dst.put_slice(m);
                }
            }
            Frame::Message(m) => {
                match &m.metadata {
                    Some(md) => encode_message_header_with_metadata(
                        dst,
                        m.call,
                        m.end_stream,
                        md,
                        m.payload.len(),
                    ),
                    None => encode_message_header(dst, m.call, m.end_stream, m.payload.len()),
                }
                dst.put_slice(&m.payload);
            }
            Frame::End(e) => {
                let mut f = 0;
                if e.message.is_some() {
                    f |= flags::END_MESSAGE;
                }
                if e.details.is_some() {
                    f |= flags::END_DETAILS;
                }
                if e.trailers.is_some() {
                    f |= flags::END_TRAILERS;
                }
                put_header(dst, FrameType::End, f, self.body_len());
                varint::put(dst, u64::from(e.call));
                varint::put(dst, u64::from(e.code.as_u8()));
                if let Some(m) = &e.message {
                    put_field(dst, m.as_bytes());
                }
                if let Some(d) = &e.details {
                    put_field(dst, d);
                }
                if let Some(t) = &e.trailers {
                    put_field(dst, t.as_bytes());
                }
            }
            Frame::Cancel(c) => {
                put_header(dst, FrameType::Cancel, 0, self.body_len());
                varint::put(dst, u64::from(c.call));
                varint::put(dst, u64::from(c.code.as_u8()));
            }
            Frame::Credit(c) => {
                put_header(dst, FrameType::Credit, 0, self.body_len());
                varint::put(dst, u64::from(c.call));
                varint::put(dst, u64::from(c.n));
            }
            Frame::Ping(p) => {
                let f = if p.ack { flags::ACK } else { 0 };
                put_header(dst, FrameType::Ping, f, 8);
                dst.put_slice(&p.payload);
            }
            Frame::GoAway(g) => {
                put_header(dst, FrameType::GoAway, 0, self.body_len());
                varint::put(dst, g.last_call_seq);
                varint::put(dst, u64::from(g.reason.0));
                dst.put_slice(g.message.as_bytes());
            }
        }
    }

    fn body_len(&self) -> usize {
        let v = |n: u64| varint::encoded_len(n);
        let field = |len: usize| v(len as u64) + len;
        match self {
            Frame::Settings(s) => s.body_len(),
            Frame::Bind(b) => v(b.method.into()) + b.name.len(),
            Frame::Call(c) => call_body_len(c, c.message.as_ref().map(Bytes::len)),
            Frame::Message(m) => {
                v(m.call.into())
                    + m.metadata.as_ref().map_or(0, |md| field(md.encoded_len()))
                    + m.payload.len()
            }
            Frame::End(e) => {
                v(e.call.into())
                    + 1
                    + e.message.as_ref().map_or(0, |m| field(m.len()))
                    + e.details.as_ref().map_or(0, |d| field(d.len()))
                    + e.trailers.as_ref().map_or(0, |t| field(t.encoded_len()))
            }
            Frame::Cancel(c) => v(c.call.into()) + 1,
            Frame::Credit(c) => v(c.call.into()) + v(c.n.into()),
            Frame::Ping(_) => 8,
            Frame::GoAway(g) => v(g.last_call_seq) + v(g.reason.0.into()) + g.message.len(),
        }
    }
}

/// Writes the header of a MESSAGE frame whose payload, `payload_len` bytes,
/// the caller appends next (for example by encoding a protobuf message
/// straight into `dst`).
///
/// This is the hot path: 3 bytes of framing for a message under 128 bytes
/// on a call id under 128.
#[inline]
pub fn encode_message_header<B: BufMut + ?Sized>(
    dst: &mut B,
    call: CallId,
    end_stream: bool,
    payload_len: usize,
) {
    let f = if end_stream { flags::END_STREAM } else { 0 };
    if call < 0x80 && payload_len < 0x7f {
        // Both varints one byte each: the whole header in one write.
        let ty = (FrameType::Message as u8) << 4 | f;
        dst.put_slice(&[ty, 1 + payload_len as u8, call as u8]);
        return;
    }
    let body = varint::encoded_len(call.into()) + payload_len;
    put_header(dst, FrameType::Message, f, body);
    varint::put(dst, u64::from(call));
}

/// [`encode_message_header`] for the server's first message of a call,
/// carrying the response's leading metadata.
pub fn encode_message_header_with_metadata<B: BufMut + ?Sized>(
    dst: &mut B,
    call: CallId,
    end_stream: bool,
    metadata: &Metadata,
    payload_len: usize,
) {
    let mut f = flags::MESSAGE_METADATA;
    if end_stream {
        f |= flags::END_STREAM;
    }
    let md = metadata.encoded_len();
    let body = varint::encoded_len(call.into()) + varint::encoded_len(md as u64) + md + payload_len;
    put_header(dst, FrameType::Message, f, body);
    varint::put(dst, u64::from(call));
    put_field(dst, metadata.as_bytes());
}

/// Writes a CALL frame up to its message, which the caller appends next;
/// `message_len` is `None` for a call that opens without a message.
/// `call.message` is ignored.
#[inline]
pub fn encode_call_header<B: BufMut + ?Sized>(
    dst: &mut B,
    call: &Call,
    message_len: Option<usize>,
) {
    encode_call_header_sized(dst, call, message_len, call_body_len(call, message_len));
}

/// [`encode_call_header`], with the body length the caller computed
/// already ([`Call::body_len`] of the same `message_len`), for a caller
/// that needed it first (to check it against the peer's limit).
pub fn encode_call_header_sized<B: BufMut + ?Sized>(
    dst: &mut B,
    call: &Call,
    message_len: Option<usize>,
    body_len: usize,
) {
    debug_assert_eq!(body_len, call_body_len(call, message_len));
    let mut f = 0;
    if call.end_stream {
        f |= flags::END_STREAM;
    }
    if message_len.is_some() {
        f |= flags::CALL_MESSAGE;
    }
    if call.timeout_micros.is_some() {
        f |= flags::CALL_DEADLINE;
    }
    if call.metadata.is_some() {
        f |= flags::CALL_METADATA;
    }
    put_header(dst, FrameType::Call, f, body_len);
    varint::put(dst, u64::from(call.call));
    varint::put(dst, u64::from(call.method));
    if let Some(t) = call.timeout_micros {
        varint::put(dst, t);
    }
    if let Some(md) = &call.metadata {
        put_field(dst, md.as_bytes());
    }
}

fn call_body_len(c: &Call, message_len: Option<usize>) -> usize {
    varint::encoded_len(c.call.into())
        + varint::encoded_len(c.method.into())
        + c.timeout_micros.map_or(0, varint::encoded_len)
        + c.metadata.as_ref().map_or(0, |m| {
            varint::encoded_len(m.encoded_len() as u64) + m.encoded_len()
        })
        + message_len.unwrap_or(0)
}

#[inline]
fn put_header<B: BufMut + ?Sized>(dst: &mut B, ty: FrameType, flags: u8, body_len: usize) {
    dst.put_u8((ty as u8) << 4 | flags);
    varint::put(dst, body_len as u64);
}

fn put_field<B: BufMut + ?Sized>(dst: &mut B, bytes: &[u8]) {
    varint::put(dst, bytes.len() as u64);
    dst.put_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_is_answered_once() {
        let ping = Ping {
            ack: false,
            payload: *b"12345678",
        };
        let pong = ping.reply().unwrap();
        assert_eq!(
            pong,
            Ping {
                ack: true,
                payload: *b"12345678"
            }
        );
        assert_eq!(pong.reply(), None, "an answer is not answered");
    }

    #[test]
    fn a_message_header_is_the_same_written_whole_or_field_by_field() {
        for call in [0, 1, 5, 126, 127, 128, 300, u32::MAX] {
            for len in [0, 1, 100, 125, 126, 127, 128, 200, 70_000] {
                for end_stream in [false, true] {
                    let mut fast = Vec::new();
                    encode_message_header(&mut fast, call, end_stream, len);
                    let mut slow = Vec::new();
                    let f = if end_stream { flags::END_STREAM } else { 0 };
                    let body = varint::encoded_len(call.into()) + len;
                    put_header(&mut slow, FrameType::Message, f, body);
                    varint::put(&mut slow, u64::from(call));
                    assert_eq!(fast, slow, "call {call}, {len} bytes, end {end_stream}");
                }
            }
        }
    }
}
