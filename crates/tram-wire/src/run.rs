//! Runs of plain MESSAGE frames of one call, taken off a read buffer as
//! one slice: how a stream of small messages is received.

use bytes::{Buf, Bytes, BytesMut};

use crate::decode::PLAIN_MESSAGE;
use crate::{CallId, FrameDecoder, varint};

impl FrameDecoder {
    /// Takes the run of plain MESSAGE frames of one call at the front of
    /// `src`: complete MESSAGE frames with no flags (no metadata, not the
    /// end of the stream) whose call id is the first one's, as many as
    /// follow one another, split off `src` as one slice.
    ///
    /// A stream of small messages arrives as such runs, and a receiver that
    /// queues a run as a whole makes one hand-off, one queue entry and one
    /// reference count per run rather than per message; the messages are
    /// parsed out of it as they are consumed ([`MessageRun::next`]).
    ///
    /// `None`, with `src` untouched, if the front frame is not such a
    /// frame or is not complete: [`decode`](FrameDecoder::decode) then
    /// takes it (and reports it, if it is malformed). Every frame of a run
    /// is one `decode` would return as a
    /// [`Frame::Message`](crate::Frame::Message) with the same call and
    /// payload.
    #[inline]
    pub fn decode_run(&mut self, src: &mut BytesMut) -> Option<MessageRun> {
        // Checked here, inline, because most frames fail it: every unary
        // call's CALL and answer.
        if src.first() != Some(&PLAIN_MESSAGE) {
            return None;
        }
        self.take_run(src)
    }

    fn take_run(&mut self, src: &mut BytesMut) -> Option<MessageRun> {
        let mut call = None;
        let (mut pos, mut len) = (0, 0);
        while let Some(&first) = src.get(pos) {
            if first != PLAIN_MESSAGE {
                break;
            }
            let Ok((body_len, n)) = varint::read(&src[pos + 1..]) else {
                break;
            };
            if body_len > u64::from(self.max_frame_size()) {
                break;
            }
            // Bounded by max_frame_size (a u32), so this fits.
            let end = pos + 1 + n + body_len as usize;
            let Some(body) = src.get(pos + 1 + n..end) else {
                break;
            };
            let Some(id) = varint::read(body)
                .ok()
                .and_then(|(id, _)| u32::try_from(id).ok())
            else {
                break;
            };
            if *call.get_or_insert(id) != id {
                break;
            }
            pos = end;
            len += 1;
        }
        Some(MessageRun {
            call: call?,
            len,
            frames: src.split_to(pos).freeze(),
        })
    }
}

/// Plain MESSAGE frames of one call, as they were on the wire, from
/// [`FrameDecoder::decode_run`]: an iterator over their payloads, each a
/// slice of the run (no copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRun {
    call: CallId,
    /// Messages not yet taken.
    len: usize,
    /// Their frames, checked whole by `decode_run`.
    frames: Bytes,
}

impl MessageRun {
    /// The call every message of the run belongs to.
    pub fn call(&self) -> CallId {
        self.call
    }

    /// Takes the next message's frame off the front: the length of its
    /// payload, which is then at the front of `frames`.
    #[inline]
    fn advance_to_payload(&mut self) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        // Most frames of a run are small: a one-byte body length and a
        // one-byte call id (a body of at least the id).
        if let [_, body @ 1..0x80, 0..0x80, ..] = self.frames[..] {
            self.frames.advance(3);
            self.len -= 1;
            return Some(usize::from(body) - 1);
        }
        // `decode_run` checked every frame, so neither read can fail; were
        // one to, the run ends there rather than yield garbage.
        let parsed = varint::read(&self.frames[1..]).ok().and_then(|(body, n)| {
            let (_, m) = varint::read(&self.frames[1 + n..]).ok()?;
            Some((1 + n + m, (body as usize).checked_sub(m)?))
        });
        let Some((head, payload)) = parsed else {
            debug_assert!(false, "a checked run does not parse");
            self.len = 0;
            return None;
        };
        self.frames.advance(head);
        self.len -= 1;
        Some(payload)
    }

    /// Hands the next message's payload to `f` as a [`Buf`] over exactly
    /// its bytes (taking it from the run), without making a `Bytes` of it
    /// first: a decoder that copies out what it keeps, or slices the run
    /// for a `Bytes` field, costs no reference count for the message
    /// itself.
    #[inline]
    pub fn next_with<T>(&mut self, f: impl FnOnce(&mut Payload<'_>) -> T) -> Option<T> {
        let len = self.advance_to_payload()?;
        let out = {
            let mut payload = Payload {
                rest: &self.frames[..len],
                run: &self.frames,
            };
            f(&mut payload)
        };
        // Whatever `f` left unread of the payload is skipped.
        self.frames.advance(len);
        Some(out)
    }
}

/// One message's payload inside a [`MessageRun`], as a [`Buf`]: a plain
/// slice, which keeps a decoder's position in a register (a
/// `Take<&mut Bytes>` reads and writes it through two references per
/// byte), and whose [`Buf::copy_to_bytes`] slices the run instead of
/// copying, whatever the field's size. A slice costs two atomic operations
/// on the read buffer's count (taken now, given back when the field is
/// dropped) and keeps the buffer alive while the field lives; a copy of a
/// small field costs an allocation and its free, which is dearer on some
/// machines and no cheaper on any measured (docs/bench-log.md). A caller
/// that keeps a field long copies it itself.
#[derive(Debug)]
pub struct Payload<'a> {
    /// What is left of the payload.
    rest: &'a [u8],
    /// The run's bytes, which `rest` lies in.
    run: &'a Bytes,
}

impl Buf for Payload<'_> {
    #[inline]
    fn remaining(&self) -> usize {
        self.rest.len()
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        self.rest
    }

    #[inline]
    fn advance(&mut self, cnt: usize) {
        self.rest = &self.rest[cnt..];
    }

    #[inline]
    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        let (taken, rest) = self.rest.split_at(len);
        self.rest = rest;
        if taken.is_empty() {
            return Bytes::new();
        }
        self.run.slice_ref(taken)
    }
}

impl Iterator for MessageRun {
    type Item = Bytes;

    /// The next message's payload.
    #[inline]
    fn next(&mut self) -> Option<Bytes> {
        let len = self.advance_to_payload()?;
        Some(self.frames.split_to(len))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.len, Some(self.len))
    }
}

impl ExactSizeIterator for MessageRun {}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::decode::tests::raw;
    use crate::frame::Message;
    use crate::{Frame, FrameType};

    /// A message's payload handed to a decoder: read in part (the rest is
    /// skipped); what it keeps is sliced out of the run without a copy,
    /// however small.
    #[test]
    fn payloads_of_a_run_are_slices_and_unread_bytes_are_skipped() {
        let large = vec![b'x'; 4096];
        let mut src = raw(FrameType::Message, 0, &[7], b"hello world");
        src.extend_from_slice(&raw(FrameType::Message, 0, &[7], &large));
        let mut run = FrameDecoder::new(1 << 20).decode_run(&mut src).unwrap();
        assert_eq!(run.len(), 2);
        let head = run.next_with(|p| {
            assert_eq!(p.remaining(), 11);
            let rest = p.chunk().as_ptr();
            let b = p.copy_to_bytes(5);
            assert_eq!(b.as_ptr(), rest, "small: a slice of the run too");
            b
        });
        let head = head.unwrap();
        assert_eq!(&head[..], b"hello");
        let whole = run.next_with(|p| {
            let rest = p.chunk().as_ptr();
            let b = p.copy_to_bytes(p.remaining());
            assert_eq!(b.as_ptr(), rest, "a slice of the run, not a copy");
            assert_eq!(p.remaining(), 0);
            assert!(p.copy_to_bytes(0).is_empty());
            b
        });
        assert_eq!(whole.unwrap(), large);
        assert_eq!(run.next_with(|p| p.remaining()), None);
    }

    proptest! {
        /// Taking runs first, then frames one by one, yields the very
        /// messages (and the same error, at the same point) that decoding
        /// frame by frame does; runs hold plain messages of one call only.
        #[test]
        fn runs_hold_exactly_the_plain_messages_of_one_call(
            frames in proptest::collection::vec(
                (
                    prop_oneof![4 => Just(FrameType::Message), 1 => Just(FrameType::Call), 1 => Just(FrameType::Credit)],
                    prop_oneof![4 => Just(0u8), 1 => 0u8..16],
                    proptest::collection::vec(
                        prop_oneof![4 => 0u64..3, 1 => any::<u32>().prop_map(u64::from), 1 => any::<u64>()],
                        0..3,
                    ),
                    proptest::collection::vec(any::<u8>(), 0..8),
                ),
                0..12,
            ),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = BytesMut::new();
            for (ty, fl, varints, tail) in &frames {
                bytes.extend_from_slice(&raw(*ty, fl & ty.allowed_flags(), varints, tail));
            }
            // Sometimes the last frame is incomplete.
            let keep = bytes.len() - cut.index(bytes.len().min(3) + 1).min(bytes.len());
            bytes.truncate(keep);
            let mut dec = FrameDecoder::new(1 << 20);

            let mut one_by_one = Vec::new();
            let mut src = bytes.clone();
            let general_end = loop {
                match dec.decode(&mut src) {
                    Ok(Some(f)) => one_by_one.push(f),
                    other => break other,
                }
            };

            let mut with_runs = Vec::new();
            let mut src = bytes.clone();
            let runs_end = loop {
                if let Some(mut run) = dec.decode_run(&mut src) {
                    prop_assert!(run.len() > 0);
                    let call = run.call();
                    // Both ways of taking a message, in turn.
                    for i in 0.. {
                        let payload = if i % 2 == 0 {
                            run.next()
                        } else {
                            run.next_with(|b| b.copy_to_bytes(b.remaining()))
                        };
                        let Some(payload) = payload else { break };
                        with_runs.push(Frame::Message(Message {
                            call,
                            end_stream: false,
                            metadata: None,
                            payload,
                        }));
                    }
                    continue;
                }
                match dec.decode(&mut src) {
                    Ok(Some(f)) => with_runs.push(f),
                    other => break other,
                }
            };
            prop_assert_eq!(&one_by_one, &with_runs);
            prop_assert_eq!(general_end, runs_end);
        }
    }
}
