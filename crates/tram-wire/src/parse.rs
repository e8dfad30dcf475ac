//! Parsing one frame's body, once the decoder knows it is all in the
//! buffer: validated on a borrowed view first (so that an invalid frame
//! costs no copy and allocates nothing), then split off the buffer, each
//! payload a `Bytes` slice of it.

use bytes::{Buf, Bytes, BytesMut};

use crate::frame::{Bind, Call, Cancel, Credit, End, GoAway, Message, Ping, flags};
use crate::{CallId, Code, Error, Frame, FrameType, Metadata, Reason, Settings, varint};

/// Parses the body of a `ty` frame with flags `fl` at `src[header_len..]`
/// and consumes the whole frame from `src`.
pub(crate) fn decode_body(
    ty: FrameType,
    fl: u8,
    src: &mut BytesMut,
    header_len: usize,
    body_len: usize,
) -> Result<Frame, Error> {
    // Validate on a borrowed view first; only a valid frame is consumed.
    let view = &src[header_len..header_len + body_len];
    let parsed = parse(ty, fl, view)?;
    src.advance(header_len);
    let mut body = Body {
        src,
        pos: 0,
        len: body_len,
    };
    let frame = parsed.into_frame(&mut body);
    body.finish();
    Ok(frame)
}

/// A valid frame body at the front of the read buffer, from which payload
/// ranges (in increasing order) are split off as `Bytes`: one reference
/// count per payload, and none for frames without payloads.
struct Body<'a> {
    src: &'a mut BytesMut,
    /// Body bytes consumed so far.
    pos: usize,
    len: usize,
}

impl Body<'_> {
    fn take(&mut self, range: Range) -> Bytes {
        debug_assert!(range.start >= self.pos && range.end <= self.len);
        self.src.advance(range.start - self.pos);
        self.pos = range.end;
        self.src.split_to(range.end - range.start).freeze()
    }

    fn finish(self) {
        self.src.advance(self.len - self.pos);
    }
}

/// A frame parsed from a borrowed body: byte fields are ranges into it, so
/// that validation allocates nothing and an invalid frame costs no copy.
enum Parsed {
    Settings(Settings),
    Bind {
        method: u32,
        name: String,
    },
    Call {
        call: CallId,
        method: u32,
        end_stream: bool,
        timeout_micros: Option<u64>,
        metadata: Option<Range>,
        message: Option<Range>,
    },
    Message {
        call: CallId,
        end_stream: bool,
        metadata: Option<Range>,
        payload: Range,
    },
    End {
        call: CallId,
        code: Code,
        message: Option<String>,
        details: Option<Range>,
        trailers: Option<Range>,
    },
    Cancel(Cancel),
    Credit(Credit),
    Ping(Ping),
    GoAway(GoAway),
}

type Range = std::ops::Range<usize>;

impl Parsed {
    fn into_frame(self, body: &mut Body<'_>) -> Frame {
        // Metadata ranges were validated during parsing.
        let md = |body: &mut Body<'_>, r: Range| Metadata::from_validated(body.take(r));
        match self {
            Parsed::Settings(s) => Frame::Settings(s),
            Parsed::Bind { method, name } => Frame::Bind(Bind { method, name }),
            Parsed::Call {
                call,
                method,
                end_stream,
                timeout_micros,
                metadata,
                message,
            } => {
                // In wire order: metadata before the message.
                let metadata = metadata.map(|r| md(body, r));
                Frame::Call(Call {
                    call,
                    method,
                    end_stream,
                    timeout_micros,
                    metadata,
                    message: message.map(|r| body.take(r)),
                })
            }
            Parsed::Message {
                call,
                end_stream,
                metadata,
                payload,
            } => {
                // In wire order: metadata before the message.
                let metadata = metadata.map(|r| md(body, r));
                Frame::Message(Message {
                    call,
                    end_stream,
                    metadata,
                    payload: body.take(payload),
                })
            }
            Parsed::End {
                call,
                code,
                message,
                details,
                trailers,
            } => {
                // In wire order: details before trailers.
                let details = details.map(|r| body.take(r));
                Frame::End(End {
                    call,
                    code,
                    message,
                    details,
                    trailers: trailers.map(|r| md(body, r)),
                })
            }
            Parsed::Cancel(c) => Frame::Cancel(c),
            Parsed::Credit(c) => Frame::Credit(c),
            Parsed::Ping(p) => Frame::Ping(p),
            Parsed::GoAway(g) => Frame::GoAway(g),
        }
    }
}

fn parse(ty: FrameType, fl: u8, body: &[u8]) -> Result<Parsed, Error> {
    let mut r = Reader { body, pos: 0, ty };
    let parsed = match ty {
        FrameType::Settings => return Settings::decode_body(body).map(Parsed::Settings),
        FrameType::Bind => {
            let method = r.u32("method id")?;
            let name = r.text(body.len() - r.pos, "method name")?;
            if name.is_empty() {
                return Err(Error::OutOfRange {
                    frame: ty,
                    field: "method name (empty)",
                });
            }
            Parsed::Bind { method, name }
        }
        FrameType::Call => {
            let call = r.u32("call id")?;
            let method = r.u32("method id")?;
            let timeout_micros = if fl & flags::CALL_DEADLINE != 0 {
                Some(r.varint()?)
            } else {
                None
            };
            let metadata = if fl & flags::CALL_METADATA != 0 {
                Some(r.metadata()?)
            } else {
                None
            };
            let message = if fl & flags::CALL_MESSAGE != 0 {
                Some(r.rest())
            } else {
                None
            };
            Parsed::Call {
                call,
                method,
                end_stream: fl & flags::END_STREAM != 0,
                timeout_micros,
                metadata,
                message,
            }
        }
        FrameType::Message => {
            let call = r.u32("call id")?;
            let metadata = if fl & flags::MESSAGE_METADATA != 0 {
                Some(r.metadata()?)
            } else {
                None
            };
            Parsed::Message {
                call,
                end_stream: fl & flags::END_STREAM != 0,
                metadata,
                payload: r.rest(),
            }
        }
        FrameType::End => {
            let call = r.u32("call id")?;
            let code = r.code()?;
            let message = if fl & flags::END_MESSAGE != 0 {
                let len = r.len()?;
                Some(r.text(len, "status message")?)
            } else {
                None
            };
            let details = if fl & flags::END_DETAILS != 0 {
                let len = r.len()?;
                Some(r.take(len)?)
            } else {
                None
            };
            let trailers = if fl & flags::END_TRAILERS != 0 {
                Some(r.metadata()?)
            } else {
                None
            };
            Parsed::End {
                call,
                code,
                message,
                details,
                trailers,
            }
        }
        FrameType::Cancel => Parsed::Cancel(Cancel {
            call: r.u32("call id")?,
            code: r.code()?,
        }),
        FrameType::Credit => {
            let call = r.u32("call id")?;
            let n = r.u32("credit")?;
            if n == 0 || n > crate::settings::MAX_CREDIT {
                return Err(Error::OutOfRange {
                    frame: ty,
                    field: "credit (must be 1..=2^31-1)",
                });
            }
            Parsed::Credit(Credit { call, n })
        }
        FrameType::Ping => {
            let range = r.take(8)?;
            let mut payload = [0u8; 8];
            payload.copy_from_slice(&body[range]);
            Parsed::Ping(Ping {
                ack: fl & flags::ACK != 0,
                payload,
            })
        }
        FrameType::GoAway => {
            let last_call_seq = r.varint()?;
            let reason = Reason(r.u32("reason")?);
            let message = r.text(body.len() - r.pos, "goaway message")?;
            Parsed::GoAway(GoAway {
                last_call_seq,
                reason,
                message,
            })
        }
    };
    if r.pos != body.len() {
        return Err(Error::TrailingBytes { frame: ty });
    }
    Ok(parsed)
}

/// A cursor over a frame body that names the frame type in its errors.
struct Reader<'a> {
    body: &'a [u8],
    pos: usize,
    ty: FrameType,
}

impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, Error> {
        match varint::read(&self.body[self.pos..]) {
            Ok((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            Err(varint::VarintError::Overflow) => Err(Error::VarintOverflow),
            Err(varint::VarintError::Incomplete) => Err(Error::Truncated { frame: self.ty }),
        }
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, Error> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| Error::OutOfRange {
            frame: self.ty,
            field,
        })
    }

    fn code(&mut self) -> Result<Code, Error> {
        let v = self.varint()?;
        Code::from_u64(v).ok_or(Error::InvalidCode(v))
    }

    fn len(&mut self) -> Result<usize, Error> {
        let v = self.varint()?;
        usize::try_from(v)
            .ok()
            .filter(|&n| n <= self.body.len() - self.pos)
            .ok_or(Error::Truncated { frame: self.ty })
    }

    fn take(&mut self, len: usize) -> Result<Range, Error> {
        if len > self.body.len() - self.pos {
            return Err(Error::Truncated { frame: self.ty });
        }
        let start = self.pos;
        self.pos += len;
        Ok(start..self.pos)
    }

    fn rest(&mut self) -> Range {
        let start = self.pos;
        self.pos = self.body.len();
        start..self.pos
    }

    fn text(&mut self, len: usize, field: &'static str) -> Result<String, Error> {
        let range = self.take(len)?;
        std::str::from_utf8(&self.body[range])
            .map(str::to_owned)
            .map_err(|_| Error::InvalidUtf8 { field })
    }

    fn metadata(&mut self) -> Result<Range, Error> {
        let len = self.len()?;
        let range = self.take(len)?;
        Metadata::validate(&self.body[range.clone()])?;
        Ok(range)
    }
}
