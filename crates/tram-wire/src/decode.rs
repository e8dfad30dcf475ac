//! Incremental frame decoding.
//!
//! [`FrameDecoder::decode`] looks at the front of a read buffer: `Ok(None)`
//! means the frame is not complete yet, `Ok(Some(frame))` consumes it, and
//! `Err` means the bytes can never become a valid frame. Whether input is
//! garbage is decided from the first byte (type and flags) and at most ten
//! more (the length), so a decoder never waits on garbage: 64 bytes of `0xFF`
//! fail on the first byte, and a header announcing 4 GiB fails as soon as its
//! length is read, before anything is buffered.

use bytes::{Buf, BytesMut};

use crate::frame::{Call, Message, flags};
use crate::parse::decode_body;
use crate::{Error, Frame, FrameType, Metadata, varint};

/// A frame header: type, flags and body length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The frame type.
    pub frame_type: FrameType,
    /// The flags nibble.
    pub flags: u8,
    /// The body's length in bytes.
    pub body_len: usize,
    /// The header's own length in bytes (1 + the length varint).
    pub header_len: usize,
}

impl Header {
    /// Parses the header at the front of `src`.
    ///
    /// Returns `Ok(None)` if `src` ends inside the header.
    ///
    /// # Errors
    ///
    /// An unknown type, undefined flags, an overlong length varint, or a
    /// body longer than `max_frame_size`.
    pub fn parse(src: &[u8], max_frame_size: u32) -> Result<Option<Header>, Error> {
        let Some(&first) = src.first() else {
            return Ok(None);
        };
        let frame_type =
            FrameType::from_u8(first >> 4).ok_or(Error::UnknownFrameType(first >> 4))?;
        let flags = first & 0x0f;
        if flags & !frame_type.allowed_flags() != 0 {
            return Err(Error::UnknownFlags {
                frame: frame_type,
                flags,
            });
        }
        let (len, n) = match varint::read(&src[1..]) {
            Ok(v) => v,
            Err(varint::VarintError::Incomplete) => return Ok(None),
            Err(varint::VarintError::Overflow) => return Err(Error::VarintOverflow),
        };
        if len > u64::from(max_frame_size) {
            return Err(Error::FrameTooLarge {
                len,
                max: max_frame_size,
            });
        }
        Ok(Some(Header {
            frame_type,
            flags,
            // Bounded by max_frame_size (a u32), so this fits.
            body_len: len as usize,
            header_len: 1 + n,
        }))
    }
}

/// Decodes frames from a byte buffer, enforcing a maximum frame size.
#[derive(Debug, Clone)]
pub struct FrameDecoder {
    max_frame_size: u32,
}

impl FrameDecoder {
    /// A decoder that rejects frame bodies over `max_frame_size` bytes.
    pub fn new(max_frame_size: u32) -> FrameDecoder {
        FrameDecoder { max_frame_size }
    }

    /// The largest frame body accepted.
    pub fn max_frame_size(&self) -> u32 {
        self.max_frame_size
    }

    /// Changes the largest frame body accepted.
    pub fn set_max_frame_size(&mut self, max: u32) {
        self.max_frame_size = max;
    }

    /// The whole length (header and body) of the frame `src` begins with,
    /// once its header is there; `None` before that, or for a header
    /// [`FrameDecoder::decode`] rejects. Nothing is checked against the
    /// bytes after the header.
    pub fn frame_len(&self, src: &[u8]) -> Option<usize> {
        match Header::parse(src, self.max_frame_size) {
            Ok(Some(head)) => Some(head.header_len + head.body_len),
            _ => None,
        }
    }

    /// Decodes the frame at the front of `src`, if it is complete.
    ///
    /// On `Ok(Some(_))` the frame's bytes are removed from `src`; its
    /// payloads are slices of them (no copy). On `Ok(None)` nothing is
    /// consumed and nothing is allocated: `src` is left exactly as it was,
    /// and growing it is the caller's business (what the header announces
    /// never sizes an allocation).
    ///
    /// # Errors
    ///
    /// Any [`Error`]: the connection should be closed with
    /// [`Error::reason`]. `src` is left as it was.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Error> {
        if let Some(frame) = self.decode_short(src) {
            return Ok(Some(frame));
        }
        self.decode_any(src)
    }

    /// The frames nearly every call is made of, when short: a MESSAGE or a
    /// CALL without metadata whose length, call id and method id are one
    /// byte each. Checked byte by byte and sliced off in one split, with
    /// none of the general path's header parse; the general path takes
    /// everything else, errors included (`None` here leaves `src` as it
    /// was). Both return the same frame for the same bytes.
    #[inline]
    fn decode_short(&self, src: &mut BytesMut) -> Option<Frame> {
        let &[first, len @ 1..0x80, call @ 0..0x80, ref rest @ ..] = &src[..] else {
            return None;
        };
        let body_len = usize::from(len);
        if rest.len() + 1 < body_len || u32::from(len) > self.max_frame_size {
            return None;
        }
        let end_stream = first & flags::END_STREAM != 0;
        let call = u32::from(call);
        match first & !flags::END_STREAM {
            PLAIN_MESSAGE => {
                let mut payload = src.split_to(2 + body_len).freeze();
                payload.advance(3);
                Some(Frame::Message(Message {
                    call,
                    end_stream,
                    metadata: None,
                    payload,
                }))
            }
            b if b & !(flags::CALL_MESSAGE | flags::CALL_DEADLINE) == PLAIN_CALL => {
                let &[method @ 0..0x80, ref after @ ..] = rest else {
                    return None;
                };
                let mut head = 4;
                let timeout_micros = if b & flags::CALL_DEADLINE != 0 {
                    let (t, n) = varint::read(after.get(..body_len.checked_sub(2)?)?).ok()?;
                    head += n;
                    Some(t)
                } else {
                    None
                };
                let has_message = b & flags::CALL_MESSAGE != 0;
                // The method id (and the deadline) must lie within the
                // frame: a body of the call id alone ends before them.
                if head > 2 + body_len || (!has_message && head != 2 + body_len) {
                    return None;
                }
                // Without a message nothing of the frame is kept: no
                // slice, and no count taken on the read buffer.
                let message = if has_message {
                    let mut frame = src.split_to(2 + body_len).freeze();
                    frame.advance(head);
                    Some(frame)
                } else {
                    src.advance(2 + body_len);
                    None
                };
                Some(Frame::Call(Call {
                    call,
                    method: u32::from(method),
                    end_stream,
                    timeout_micros,
                    metadata: None,
                    message,
                }))
            }
            _ => None,
        }
    }

    /// [`decode`](FrameDecoder::decode) for any frame.
    fn decode_any(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, Error> {
        let Some(head) = Header::parse(src, self.max_frame_size)? else {
            return Ok(None);
        };
        let total = head.header_len + head.body_len;
        if src.len() < total {
            // No reservation here: growing the read buffer is the I/O
            // layer's job, with the bytes that actually arrive. A header
            // that claims the maximum and is followed by nothing must not
            // make anyone allocate the maximum.
            return Ok(None);
        }
        if let Some(frame) = decode_direct(&head, src) {
            return Ok(Some(frame));
        }
        // Check the body before consuming it so that an error leaves `src`
        // untouched; slicing happens only once it is known to be valid.
        let frame = decode_body(
            head.frame_type,
            head.flags,
            src,
            head.header_len,
            head.body_len,
        )?;
        Ok(Some(frame))
    }
}

/// The first byte of a MESSAGE frame with no flags.
pub(crate) const PLAIN_MESSAGE: u8 = (FrameType::Message as u8) << 4;
/// The first byte of a CALL frame with no flags.
const PLAIN_CALL: u8 = (FrameType::Call as u8) << 4;

/// The two frames of every call, MESSAGE (without metadata) and CALL (with
/// or without), decoded straight from `src`: the general path builds an
/// intermediate form of every frame and moves it around, which for these
/// small frames cost as much as the decoding itself. `None` for any other
/// frame, and for any body these do not read cleanly (a call id that is not
/// a `u32`, a metadata block that is not valid, trailing bytes): the
/// general path then reports the error. The frames returned are exactly the
/// general path's.
#[inline]
fn decode_direct(head: &Header, src: &mut BytesMut) -> Option<Frame> {
    let fl = head.flags;
    if head.frame_type == FrameType::Message && fl & flags::MESSAGE_METADATA != 0 {
        return None;
    }
    let body = &src[head.header_len..head.header_len + head.body_len];
    let mut pos = 0;
    let mut next = || -> Option<u64> {
        let (v, n) = varint::read(&body[pos..]).ok()?;
        pos += n;
        Some(v)
    };
    let end_stream = fl & flags::END_STREAM != 0;
    match head.frame_type {
        FrameType::Message => {
            let call = u32::try_from(next()?).ok()?;
            src.advance(head.header_len + pos);
            let payload = src.split_to(head.body_len - pos).freeze();
            Some(Frame::Message(Message {
                call,
                end_stream,
                metadata: None,
                payload,
            }))
        }
        FrameType::Call => {
            let call = u32::try_from(next()?).ok()?;
            let method = u32::try_from(next()?).ok()?;
            let timeout_micros = if fl & flags::CALL_DEADLINE != 0 {
                Some(next()?)
            } else {
                None
            };
            // The metadata block: its length, then its entries, each
            // checked where it lies before anything is consumed.
            let metadata_len = if fl & flags::CALL_METADATA != 0 {
                let len = usize::try_from(next()?).ok()?;
                let block = body.get(pos..pos.checked_add(len)?)?;
                Metadata::validate(block).ok()?;
                Some(len)
            } else {
                None
            };
            let fields_end = pos + metadata_len.unwrap_or(0);
            let has_message = fl & flags::CALL_MESSAGE != 0;
            if !has_message && fields_end != head.body_len {
                return None;
            }
            src.advance(head.header_len + pos);
            let metadata =
                metadata_len.map(|len| Metadata::from_validated(src.split_to(len).freeze()));
            let message = has_message.then(|| src.split_to(head.body_len - fields_end).freeze());
            Some(Frame::Call(Call {
                call,
                method,
                end_stream,
                timeout_micros,
                metadata,
                message,
            }))
        }
        _ => None,
    }
}

/// Decodes one whole frame from `src`, which must hold exactly that frame.
///
/// # Errors
///
/// Any [`Error`], including [`Error::Truncated`] if `src` is shorter than
/// the frame and [`Error::TrailingBytes`] if it is longer.
pub fn decode_exact(src: &[u8], max_frame_size: u32) -> Result<Frame, Error> {
    let mut buf = BytesMut::from(src);
    let mut dec = FrameDecoder::new(max_frame_size);
    match dec.decode(&mut buf)? {
        Some(frame) if buf.is_empty() => Ok(frame),
        Some(frame) => Err(Error::TrailingBytes {
            frame: frame.frame_type(),
        }),
        None => {
            let frame = match Header::parse(src, max_frame_size)? {
                Some(h) => h.frame_type,
                // An empty input or a cut-off header: name the type if known.
                None => src
                    .first()
                    .and_then(|b| FrameType::from_u8(b >> 4))
                    .unwrap_or(FrameType::Settings),
            };
            Err(Error::Truncated { frame })
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The raw bytes of a CALL or MESSAGE frame whose body holds `varints`
    /// then `tail`.
    pub(crate) fn raw(ty: FrameType, fl: u8, varints: &[u64], tail: &[u8]) -> BytesMut {
        let mut body = BytesMut::new();
        for &v in varints {
            varint::put(&mut body, v);
        }
        body.extend_from_slice(tail);
        let mut b = BytesMut::new();
        b.extend_from_slice(&[(ty as u8) << 4 | fl]);
        varint::put(&mut b, body.len() as u64);
        b.extend_from_slice(&body);
        b
    }

    /// A unary call's two frames, and a call with a deadline, take the
    /// short path; a frame with metadata, a long one and a cut one do not.
    #[test]
    fn short_frames_take_the_short_path() {
        let dec = FrameDecoder::new(1 << 20);
        let call = flags::CALL_MESSAGE | flags::END_STREAM;
        for bytes in [
            raw(FrameType::Call, call, &[3, 9], b"request"),
            raw(
                FrameType::Call,
                call | flags::CALL_DEADLINE,
                &[3, 9, 250_000],
                b"r",
            ),
            raw(FrameType::Call, flags::END_STREAM, &[3, 9], b""),
            raw(FrameType::Message, flags::END_STREAM, &[3], b"answer"),
        ] {
            assert!(dec.decode_short(&mut bytes.clone()).is_some(), "{bytes:?}");
        }
        for bytes in [
            raw(
                FrameType::Call,
                call | flags::CALL_METADATA,
                &[3, 9, 0],
                b"",
            ),
            raw(FrameType::Message, 0, &[3], &[0; 200]),
            raw(FrameType::Message, 0, &[300], b"id of two bytes"),
            raw(FrameType::Credit, 0, &[3, 1], b""),
        ] {
            assert!(dec.decode_short(&mut bytes.clone()).is_none(), "{bytes:?}");
        }
        let mut cut = raw(FrameType::Message, 0, &[3], b"answer");
        cut.truncate(cut.len() - 1);
        assert!(dec.decode_short(&mut cut).is_none());
    }

    /// A CALL whose body ends after its call id, followed by another frame:
    /// the method id is not the next frame's first byte, and the frame is
    /// refused with an error, not sliced past its end (found by
    /// `run::tests`' property, as a panic).
    #[test]
    fn a_call_without_its_method_is_an_error() {
        let mut dec = FrameDecoder::new(1 << 20);
        for fl in [
            flags::CALL_MESSAGE,
            flags::CALL_MESSAGE | flags::CALL_DEADLINE,
            0,
        ] {
            let mut src = raw(FrameType::Call, fl, &[0], b"");
            src.extend_from_slice(&raw(FrameType::Message, 0, &[0], b"\0"));
            assert!(dec.decode_short(&mut src.clone()).is_none(), "{src:?}");
            assert!(dec.decode(&mut src).is_err(), "{src:?}");
        }
    }

    proptest! {
        /// The short path and the general one agree on every input, with
        /// or without bytes after the frame: the same frame or error, and
        /// as much of the buffer taken.
        #[test]
        fn short_decoding_matches_the_general_path(
            ty in prop_oneof![
                4 => Just(FrameType::Call),
                4 => Just(FrameType::Message),
                1 => Just(FrameType::Credit),
                1 => Just(FrameType::End),
            ],
            fl in 0u8..16,
            varints in proptest::collection::vec(
                prop_oneof![4 => 0u64..130, 1 => any::<u32>().prop_map(u64::from), 1 => any::<u64>()],
                0..4,
            ),
            tail in proptest::collection::vec(any::<u8>(), 0..130),
            cut in 0usize..4,
            max in prop_oneof![4 => Just(1u32 << 20), 1 => 0u32..140],
            after in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let mut bytes = raw(ty, fl, &varints, &tail);
            bytes.truncate(bytes.len().saturating_sub(cut));
            // Bytes of whatever comes next: never part of this frame.
            bytes.extend_from_slice(&after);
            let mut dec = FrameDecoder::new(max);
            let (mut short_src, mut general_src) = (bytes.clone(), bytes.clone());
            let short = dec.decode(&mut short_src);
            let general = dec.decode_any(&mut general_src);
            prop_assert_eq!(short, general);
            prop_assert_eq!(short_src, general_src);
        }

        /// CALLs with a metadata block, valid or with one byte changed,
        /// decode as on the general path (the same frame or error, as much
        /// of the buffer taken), and valid ones on the direct path.
        #[test]
        fn calls_with_metadata_decode_as_on_the_general_path(
            entries in proptest::collection::vec(
                (
                    "[a-z0-9._-]{1,10}",
                    any::<bool>(),
                    proptest::collection::vec(any::<u8>(), 0..24),
                    "[ -~]{0,40}",
                ),
                0..4,
            ),
            deadline in proptest::option::of(any::<u64>()),
            message in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)),
            call in prop_oneof![0u64..300, any::<u32>().prop_map(u64::from)],
            flip in proptest::option::of((any::<usize>(), any::<u8>())),
        ) {
            let mut block = Metadata::builder();
            for (key, binary, bytes, text) in &entries {
                if *binary {
                    block.binary(&format!("{key}-bin"), bytes).unwrap();
                } else if !key.ends_with("-bin") {
                    block.ascii(key, text).unwrap();
                }
            }
            let block = block.build();
            let mut body = BytesMut::new();
            varint::put(&mut body, call);
            varint::put(&mut body, 3);
            let mut fl = flags::CALL_METADATA | flags::END_STREAM;
            if let Some(t) = deadline {
                fl |= flags::CALL_DEADLINE;
                varint::put(&mut body, t);
            }
            varint::put(&mut body, block.encoded_len() as u64);
            body.extend_from_slice(block.as_bytes());
            if let Some(m) = &message {
                fl |= flags::CALL_MESSAGE;
                body.extend_from_slice(m);
            }
            let bytes = raw(FrameType::Call, fl, &[], &body);
            let valid = flip.is_none();
            let mut bytes = bytes;
            if let Some((at, to)) = flip {
                // Any byte after the frame's first (the type and flags).
                let at = 1 + at % (bytes.len() - 1);
                bytes[at] = to;
            }
            let mut dec = FrameDecoder::new(1 << 20);
            let (mut fast_src, mut general_src) = (bytes.clone(), bytes.clone());
            let fast = dec.decode(&mut fast_src);
            // The general path alone: the header, then the body's parse.
            let general = match Header::parse(&general_src, 1 << 20) {
                Ok(Some(head)) if general_src.len() >= head.header_len + head.body_len => {
                    decode_body(
                        head.frame_type,
                        head.flags,
                        &mut general_src,
                        head.header_len,
                        head.body_len,
                    )
                    .map(Some)
                }
                Ok(_) => Ok(None),
                Err(e) => Err(e),
            };
            prop_assert_eq!(&fast, &general);
            if fast.is_ok() {
                prop_assert_eq!(fast_src, general_src);
            }
            if valid {
                let head = Header::parse(&bytes, 1 << 20).unwrap().unwrap();
                let mut direct_src = bytes.clone();
                let direct = decode_direct(&head, &mut direct_src);
                prop_assert!(direct.is_some(), "a valid CALL with metadata takes the direct path");
                prop_assert_eq!(Ok(Some(direct.unwrap())), fast);
                let Ok(Some(Frame::Call(c))) = general else {
                    return Err(TestCaseError::fail("a valid CALL decodes to a CALL"));
                };
                prop_assert_eq!(c.metadata, Some(block));
                prop_assert_eq!(c.message.map(|m| m.to_vec()), message);
            }
        }

        /// Whenever the direct path decodes a frame, the general path
        /// decodes the same frame from the same bytes and consumes as much.
        #[test]
        fn direct_decoding_matches_the_general_path(
            call_frame in any::<bool>(),
            fl in 0u8..16,
            varints in proptest::collection::vec(
                prop_oneof![0u64..300, any::<u32>().prop_map(u64::from), any::<u64>()],
                0..4,
            ),
            tail in proptest::collection::vec(any::<u8>(), 0..24),
        ) {
            let ty = if call_frame { FrameType::Call } else { FrameType::Message };
            let fl = fl & ty.allowed_flags();
            let bytes = raw(ty, fl, &varints, &tail);
            let head = Header::parse(&bytes, 1 << 20).unwrap().unwrap();
            let mut direct_src = bytes.clone();
            if let Some(direct) = decode_direct(&head, &mut direct_src) {
                let mut general_src = bytes.clone();
                let general = decode_body(
                    head.frame_type,
                    head.flags,
                    &mut general_src,
                    head.header_len,
                    head.body_len,
                );
                prop_assert_eq!(general, Ok(direct));
                prop_assert_eq!(general_src.len(), direct_src.len());
            }
        }
    }
}
