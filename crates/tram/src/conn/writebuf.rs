//! The outbound queue's buffer: encoded bytes in one contiguous buffer,
//! and large payloads kept by reference and written in their place.
//!
//! Small messages are copied into the buffer (one `write` sends many of
//! them); a payload of [`SPLICE_MIN`] bytes or more that arrives as
//! `Bytes` — a protobuf `bytes` field, a message-stream payload, often a
//! slice of a read buffer — is not copied at all: the writer sends it with
//! `writev` between the bytes encoded before and after it.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Payloads at least this large are written by reference, not copied.
pub const SPLICE_MIN: usize = 4096;

/// Where encoders write: a [`BufMut`] whose `put` of a large [`Bytes`]
/// keeps it by reference (see the module docs).
#[derive(Debug, Default)]
pub struct WriteBuf {
    bytes: BytesMut,
    /// Bytes of `bytes` written and advanced past since it was last
    /// cleared: where the splices' offsets count from, so that consuming
    /// the front moves no offset.
    consumed: usize,
    /// Payloads kept by reference, each written before the byte of `bytes`
    /// at `at - consumed`, in order of `at`.
    spliced: VecDeque<Splice>,
    spliced_len: usize,
}

#[derive(Debug)]
struct Splice {
    at: usize,
    data: Bytes,
}

/// A point to roll a [`WriteBuf`] back to (an encoder that failed half
/// way leaves nothing behind).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    bytes: usize,
    spliced: usize,
}

impl WriteBuf {
    pub(crate) fn with_capacity(n: usize) -> WriteBuf {
        WriteBuf {
            bytes: BytesMut::with_capacity(n),
            consumed: 0,
            spliced: VecDeque::new(),
            spliced_len: 0,
        }
    }

    /// Bytes to write, spliced payloads included.
    pub fn len(&self) -> usize {
        self.bytes.len() + self.spliced_len
    }

    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `data` by reference: it is written in its place, never
    /// copied.
    pub fn splice(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        self.spliced_len += data.len();
        self.spliced.push_back(Splice {
            at: self.consumed + self.bytes.len(),
            data,
        });
    }

    /// Appends a copy of `src`.
    pub fn extend_from_slice(&mut self, src: &[u8]) {
        self.bytes.extend_from_slice(src);
    }

    /// Makes room for `additional` more bytes to be copied in.
    pub fn reserve(&mut self, additional: usize) {
        self.bytes.reserve(additional);
    }

    /// The contiguous bytes after everything spliced so far, to write into
    /// directly. What is already there must stay: grow it, or shrink it
    /// back only to what it held when taken.
    pub fn bytes_mut(&mut self) -> &mut BytesMut {
        &mut self.bytes
    }

    pub(crate) fn mark(&self) -> Mark {
        Mark {
            bytes: self.bytes.len(),
            spliced: self.spliced.len(),
        }
    }

    /// Drops everything appended since `mark`.
    pub(crate) fn rollback(&mut self, mark: Mark) {
        self.bytes.truncate(mark.bytes);
        while self.spliced.len() > mark.spliced {
            if let Some(s) = self.spliced.pop_back() {
                self.spliced_len -= s.data.len();
            }
        }
    }

    /// Whether it is all in the one buffer (nothing spliced).
    pub(crate) fn is_contiguous(&self) -> bool {
        self.spliced.is_empty()
    }

    /// The one buffer (all there is, when [`WriteBuf::is_contiguous`]).
    pub(crate) fn contiguous(&self) -> &[u8] {
        &self.bytes
    }

    /// Fills `dst` with the next slices to write, in order; how many.
    pub(crate) fn chunks<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        let mut pos = 0;
        for s in &self.spliced {
            if n == dst.len() {
                return n;
            }
            let at = s.at - self.consumed;
            if at > pos {
                dst[n] = IoSlice::new(&self.bytes[pos..at]);
                n += 1;
                pos = at;
                if n == dst.len() {
                    return n;
                }
            }
            dst[n] = IoSlice::new(&s.data);
            n += 1;
        }
        if n < dst.len() && pos < self.bytes.len() {
            dst[n] = IoSlice::new(&self.bytes[pos..]);
            n += 1;
        }
        n
    }

    /// Consumes `n` written bytes from the front, in time proportional to
    /// the pieces written (a batch of many payloads is consumed a `writev`
    /// at a time).
    pub(crate) fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let before_next = self
                .spliced
                .front()
                .map_or(self.bytes.len(), |s| s.at - self.consumed);
            if before_next > 0 {
                let k = n.min(before_next);
                self.bytes.advance(k);
                self.consumed += k;
                n -= k;
                continue;
            }
            let Some(s) = self.spliced.front_mut() else {
                return;
            };
            let k = n.min(s.data.len());
            s.data.advance(k);
            self.spliced_len -= k;
            n -= k;
            if s.data.is_empty() {
                self.spliced.pop_front();
            }
        }
    }

    /// Empties it, keeping the buffer's capacity.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.consumed = 0;
        self.spliced.clear();
        self.spliced_len = 0;
    }
}

// SAFETY: every method forwards to `BytesMut`'s own implementation, whose
// contract it keeps; `put` only adds splices, which no method of the
// contract observes.
#[allow(unsafe_code)]
unsafe impl BufMut for WriteBuf {
    fn remaining_mut(&self) -> usize {
        self.bytes.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller's guarantee (`cnt` bytes of `chunk_mut` were
        // initialised) is passed on unchanged.
        unsafe { self.bytes.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.bytes.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        self.bytes.extend_from_slice(src);
    }

    fn put<T: Buf>(&mut self, mut src: T)
    where
        Self: Sized,
    {
        // A `Bytes` hands itself over for a reference count.
        if src.remaining() >= SPLICE_MIN {
            let data = src.copy_to_bytes(src.remaining());
            self.splice(data);
        } else {
            self.bytes.put(src);
        }
    }
}

#[cfg(test)]
impl WriteBuf {
    /// What a write of everything queued would send, flattened.
    pub(crate) fn written(&self) -> Vec<u8> {
        let mut slices = vec![IoSlice::new(&[]); 2 * self.spliced.len() + 1];
        let n = self.chunks(&mut slices);
        slices[..n].iter().flat_map(|s| s.iter().copied()).collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::strategy::Strategy;

    use super::*;

    #[test]
    fn large_payloads_are_spliced_in_order_and_small_ones_copied() {
        let big = Bytes::from(vec![7u8; SPLICE_MIN]);
        let mut buf = WriteBuf::with_capacity(64);
        buf.put_slice(b"head");
        buf.put(big.clone());
        buf.put_slice(b"mid");
        buf.put(Bytes::from_static(b"small"));
        buf.put(big.clone());
        assert!(!buf.is_contiguous());
        assert_eq!(buf.len(), 4 + SPLICE_MIN + 3 + 5 + SPLICE_MIN);
        let mut want = b"head".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"midsmall");
        want.extend_from_slice(&big);
        assert_eq!(buf.written(), want);
        // Consumed in pieces that straddle the segments.
        let mut at = 0;
        for step in [3, 2, SPLICE_MIN, 1, 9, 100, SPLICE_MIN] {
            let step = step.min(buf.len());
            buf.advance(step);
            at += step;
            assert_eq!(buf.written(), want[at..]);
        }
        assert!(buf.is_empty());
    }

    proptest::proptest! {
        /// Whatever is appended, copied or spliced, and however much is
        /// consumed between appends, what is left to write is what was
        /// appended after what was consumed, in order, and a short
        /// `writev`'s slices are its start.
        #[test]
        fn what_is_left_is_what_was_appended_after_what_was_consumed(
            ops in proptest::collection::vec(
                proptest::prop_oneof![
                    (0usize..40).prop_map(Op::Copy),
                    (0usize..3 * SPLICE_MIN).prop_map(Op::Put),
                    (0usize..2 * SPLICE_MIN).prop_map(Op::Advance),
                ],
                0..60,
            ),
        ) {
            let mut buf = WriteBuf::with_capacity(16);
            let (mut model, mut consumed) = (Vec::new(), 0);
            for (i, op) in ops.into_iter().enumerate() {
                let fill = i as u8;
                match op {
                    Op::Copy(n) => {
                        buf.put_slice(&vec![fill; n]);
                        model.extend(std::iter::repeat_n(fill, n));
                    }
                    Op::Put(n) => {
                        buf.put(Bytes::from(vec![fill; n]));
                        model.extend(std::iter::repeat_n(fill, n));
                    }
                    Op::Advance(n) => {
                        let n = n.min(buf.len());
                        buf.advance(n);
                        consumed += n;
                    }
                }
                proptest::prop_assert_eq!(buf.len(), model.len() - consumed);
                proptest::prop_assert_eq!(buf.written(), &model[consumed..]);
                let mut few = [IoSlice::new(&[]); 3];
                let k = buf.chunks(&mut few);
                let start: Vec<u8> = few[..k].iter().flat_map(|s| s.iter().copied()).collect();
                proptest::prop_assert_eq!(&start[..], &model[consumed..consumed + start.len()]);
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Copy(usize),
        Put(usize),
        Advance(usize),
    }

    #[test]
    fn rollback_drops_what_came_after_the_mark() {
        let mut buf = WriteBuf::with_capacity(64);
        buf.put_slice(b"kept");
        let mark = buf.mark();
        buf.put_slice(b"gone");
        buf.put(Bytes::from(vec![1u8; SPLICE_MIN]));
        buf.rollback(mark);
        assert!(buf.is_contiguous());
        assert_eq!(buf.written(), b"kept");
    }
}
