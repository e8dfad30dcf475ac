//! How the RPC layer turns its frames into bytes and back, on top of
//! tram-wire: the preface, method binding, and messages encoded with prost
//! straight after their frame header.

use std::collections::HashMap;

use bytes::{Buf, BytesMut};
use tram_wire::{
    Bind, Call, CallId, Frame, FrameDecoder, MessageRun, Metadata, Settings,
    encode_call_header_sized, encode_message_header, encode_message_header_with_metadata, preface,
};

use super::client::calls::Calls;
use crate::conn::{Decoder, Encoder, WriteBuf};

/// Why an outgoing frame could not be encoded. Nothing of it is queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum EncodeError {
    /// The frame would exceed the peer's maximum frame size.
    #[error("message of {len} bytes exceeds the peer's maximum frame size of {max}")]
    TooLarge { len: usize, max: u32 },
    /// The peer accepts no more method bindings on this connection.
    #[error("the peer accepts at most {0} methods per connection")]
    TooManyMethods(u32),
    /// The server said GOAWAY: no new call may open on this connection.
    #[error("the server is going away: no new calls on this connection")]
    GoingAway,
}

/// The encoder of one side of an RPC connection. It lives under the
/// outbound queue's lock, which is what makes a BIND and the CALL that
/// needs it reach the wire together and in order.
#[derive(Debug)]
pub(crate) struct RpcEncoder {
    /// Method paths bound on this connection (client side).
    methods: HashMap<Box<str>, u32>,
    /// The paths by method number (numbers are given in order).
    names: Vec<Box<str>>,
    /// The method of the last CALL, checked before `methods`: a connection
    /// calling one method over and over (the usual case under load) finds
    /// it with one comparison rather than by hashing its path.
    last: u32,
    /// The peer's limits, defaults until its SETTINGS arrives.
    peer: Settings,
    /// The server said GOAWAY (client side): CALL frames are refused.
    going_away: bool,
    /// The client's call table, kept here so that it shares the queue's
    /// lock (see `client::conn::CallsGuard`); empty on a server.
    pub(crate) calls: Calls,
}

impl RpcEncoder {
    pub(crate) fn new() -> RpcEncoder {
        RpcEncoder {
            methods: HashMap::new(),
            names: Vec::new(),
            last: 0,
            // Until the peer says otherwise, stay within what every
            // receiver accepts (PROTOCOL.md §2.2).
            peer: Settings {
                max_frame_size: tram_wire::MIN_MAX_FRAME_SIZE,
                ..Settings::DEFAULT
            },
            going_away: false,
            calls: Calls::new(),
        }
    }

    /// Refuses every CALL from now on (the server said GOAWAY). Set by the
    /// reader as it handles the GOAWAY, under the queue's lock, so a CALL
    /// is either queued before anything the reader queues after it (the
    /// answer to the server's PING above all, after which the server counts
    /// no more calls, PROTOCOL.md §4.9) or not at all: a call its caller
    /// opened just before the GOAWAY is then retried elsewhere, not lost.
    pub(crate) fn stop_calls(&mut self) {
        self.going_away = true;
    }

    pub(crate) fn set_peer(&mut self, peer: Settings) {
        self.peer = peer;
    }

    fn check(&self, body_len: usize) -> Result<(), EncodeError> {
        let max = self.peer.max_frame_size;
        if body_len > max as usize {
            return Err(EncodeError::TooLarge { len: body_len, max });
        }
        Ok(())
    }
}

/// Frames up to this size are written through a plain slice.
const SMALL_FRAME: usize = 1024;
/// Frames up to this size are written into a fixed run of zeros.
const TINY_FRAME: usize = 64;

/// `put_small!(dst, max, |w| { ... })` appends at most `max` bytes to
/// `dst` by writing to `w`, which must write no more than that (the caller
/// sizes `max` from the frame's encoded length).
///
/// A small frame is written through a `&mut [u8]`, whose one-byte writes
/// compile to stores: through `BytesMut`'s `BufMut`, every `put_u8` (each
/// varint byte, each tag) is a call to `put_slice` and on to `memcpy`. The
/// bytes past what was written are zeroed first and cut off after; for a
/// frame this small that costs less than the calls saved.
/// Larger frames are written straight into `dst`.
macro_rules! put_small {
    ($dst:expr, $max:expr, |$w:ident| $write:block) => {{
        let (dst, max): (&mut WriteBuf, usize) = ($dst, $max);
        if max > SMALL_FRAME {
            dst.reserve(max);
            let $w = &mut *dst;
            $write
        } else {
            let dst = dst.bytes_mut();
            let start = dst.len();
            // A tiny frame's room is a constant's worth of zeros, which
            // compiles to a few stores instead of calls to resize and memset.
            let room = if max <= TINY_FRAME {
                dst.extend_from_slice(&[0; TINY_FRAME]);
                TINY_FRAME
            } else {
                dst.resize(start + max, 0);
                max
            };
            let mut slice: &mut [u8] = &mut dst[start..];
            {
                let $w = &mut slice;
                $write
            }
            let used = room - slice.len();
            dst.truncate(start + used);
        }
    }};
}

/// The preface and this side's SETTINGS: the first bytes on a connection.
pub(crate) struct Hello(pub(crate) Settings);

impl Encoder<Hello> for RpcEncoder {
    type Error = EncodeError;
    fn encode(&mut self, item: Hello, dst: &mut WriteBuf) -> Result<(), EncodeError> {
        dst.extend_from_slice(&preface::PREFACE);
        Frame::Settings(item.0).encode(dst);
        Ok(())
    }
}

/// A control frame (END, CANCEL, CREDIT, PING, GOAWAY).
impl Encoder<Frame> for RpcEncoder {
    type Error = EncodeError;
    fn encode(&mut self, item: Frame, dst: &mut WriteBuf) -> Result<(), EncodeError> {
        let len = item.encoded_len();
        self.check(len.saturating_sub(tram_wire::MAX_HEADER_LEN))?;
        dst.reserve(len);
        item.encode(dst);
        Ok(())
    }
}

/// One message of a call, in either direction.
pub(crate) struct Msg<'a, M> {
    pub(crate) call: CallId,
    pub(crate) end_stream: bool,
    /// Leading metadata: only on the server's first message of a call.
    pub(crate) metadata: Option<&'a Metadata>,
    pub(crate) msg: &'a M,
}

impl<M: prost::Message> Encoder<Msg<'_, M>> for RpcEncoder {
    type Error = EncodeError;
    fn encode(&mut self, item: Msg<'_, M>, dst: &mut WriteBuf) -> Result<(), EncodeError> {
        let len = item.msg.encoded_len();
        if let Some(md) = item.metadata {
            let md_len = md.encoded_len();
            if md_len > self.peer.max_metadata_size as usize {
                return Err(EncodeError::TooLarge {
                    len: md_len,
                    max: self.peer.max_metadata_size,
                });
            }
            let body = tram_wire::varint::encoded_len(item.call.into())
                + tram_wire::varint::encoded_len(md_len as u64)
                + md_len
                + len;
            self.check(body)?;
            dst.reserve(tram_wire::MAX_HEADER_LEN + body);
            encode_message_header_with_metadata(dst, item.call, item.end_stream, md, len);
            item.msg.encode_raw(dst);
            return Ok(());
        }
        self.check(tram_wire::varint::encoded_len(item.call.into()) + len)?;
        put_small!(dst, tram_wire::MAX_HEADER_LEN + 5 + len, |w| {
            encode_message_header(w, item.call, item.end_stream, len);
            item.msg.encode_raw(w);
        });
        Ok(())
    }
}

/// Opens a call on a method named by its path; binds the path first if this
/// connection has not seen it.
pub(crate) struct Open<'a, M> {
    pub(crate) path: &'a str,
    /// The call's fields, borrowed (a frame's worth of fields, not moved
    /// from layer to layer); `method` is filled in here, `message` is not
    /// used.
    pub(crate) head: &'a mut Call,
    pub(crate) msg: Option<&'a M>,
}

impl<M: prost::Message> Encoder<Open<'_, M>> for RpcEncoder {
    type Error = EncodeError;
    fn encode(&mut self, item: Open<'_, M>, dst: &mut WriteBuf) -> Result<(), EncodeError> {
        if self.going_away {
            return Err(EncodeError::GoingAway);
        }
        let head = item.head;
        let len = item.msg.map(prost::Message::encoded_len);
        if let Some(md) = &head.metadata {
            if md.encoded_len() > self.peer.max_metadata_size as usize {
                return Err(EncodeError::TooLarge {
                    len: md.encoded_len(),
                    max: self.peer.max_metadata_size,
                });
            }
        }
        let bound = match self.names.get(self.last as usize) {
            Some(name) if **name == *item.path => Some(self.last),
            _ => self.methods.get(item.path).copied(),
        };
        head.method = match bound {
            Some(id) => id,
            None => {
                let id = self.methods.len() as u32;
                if id >= self.peer.max_bound_methods {
                    return Err(EncodeError::TooManyMethods(self.peer.max_bound_methods));
                }
                id
            }
        };
        let body = head.body_len(len);
        self.check(body)?;
        if bound.is_none() {
            // Checks passed: bind now, in the same write as the CALL.
            Frame::Bind(Bind {
                method: head.method,
                name: item.path.to_owned(),
            })
            .encode(dst);
            self.methods.insert(item.path.into(), head.method);
            self.names.push(item.path.into());
        }
        self.last = head.method;
        put_small!(dst, body + tram_wire::MAX_HEADER_LEN, |w| {
            encode_call_header_sized(w, head, len, body);
            if let Some(m) = item.msg {
                m.encode_raw(w);
            }
        });
        Ok(())
    }
}

/// Decodes an RPC connection's bytes: the peer's preface, then frames.
#[derive(Debug, Clone)]
pub(crate) struct RpcDecoder {
    preface_seen: bool,
    frames: FrameDecoder,
}

impl RpcDecoder {
    pub(crate) fn new(max_frame_size: u32) -> RpcDecoder {
        RpcDecoder {
            preface_seen: false,
            frames: FrameDecoder::new(max_frame_size),
        }
    }
}

impl Decoder for RpcDecoder {
    type Item = Frame;
    type Error = tram_wire::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, tram_wire::Error> {
        if !self.preface_seen {
            match preface::check(src)? {
                None => return Ok(None),
                Some(n) => {
                    src.advance(n);
                    self.preface_seen = true;
                }
            }
        }
        self.frames.decode(src)
    }

    fn frame_len(&self, src: &[u8]) -> Option<usize> {
        if !self.preface_seen {
            return None;
        }
        self.frames.frame_len(src)
    }
}

/// What a connection's reader gets: a frame, or a run of plain messages of
/// one call (as a stream of small messages arrives).
#[derive(Debug)]
pub(crate) enum Received {
    Frame(Frame),
    Run(MessageRun),
}

/// The decoder of both ends: [`RpcDecoder`], taking plain messages of one
/// call a run at a time ([`FrameDecoder::decode_run`]) so that the reader
/// hands a stream's messages over a run at a time, parsed only as they are
/// consumed.
#[derive(Debug, Clone)]
pub(crate) struct RunDecoder(RpcDecoder);

impl RunDecoder {
    pub(crate) fn new(max_frame_size: u32) -> RunDecoder {
        RunDecoder(RpcDecoder::new(max_frame_size))
    }
}

impl Decoder for RunDecoder {
    type Item = Received;
    type Error = tram_wire::Error;

    #[inline]
    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Received>, tram_wire::Error> {
        if self.0.preface_seen {
            if let Some(run) = self.0.frames.decode_run(src) {
                return Ok(Some(Received::Run(run)));
            }
        }
        Ok(self.0.decode(src)?.map(Received::Frame))
    }

    fn frame_len(&self, src: &[u8]) -> Option<usize> {
        self.0.frame_len(src)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn call(id: CallId) -> Call {
        Call {
            call: id,
            method: 0,
            end_stream: true,
            timeout_micros: None,
            metadata: None,
            message: None,
        }
    }

    /// Once the server said GOAWAY, no CALL is queued, and nothing of it
    /// is written; other frames still are.
    #[test]
    fn calls_are_refused_once_the_server_goes_away() {
        let mut enc = RpcEncoder::new();
        let mut dst = WriteBuf::with_capacity(64);
        fn open(head: &mut Call) -> Open<'_, ()> {
            Open {
                path: "/s/m",
                head,
                msg: None,
            }
        }
        enc.encode(open(&mut call(0)), &mut dst).unwrap();
        let before = dst.len();
        assert!(before > 0);
        enc.stop_calls();
        let refused = enc.encode(open(&mut call(1)), &mut dst);
        assert_eq!(refused, Err(EncodeError::GoingAway));
        assert_eq!(dst.len(), before, "nothing of a refused CALL is written");
        let cancel = Frame::Cancel(tram_wire::Cancel {
            call: 0,
            code: tram_wire::Code::Cancelled,
        });
        enc.encode(cancel, &mut dst).unwrap();
        assert!(dst.len() > before);
    }
}
