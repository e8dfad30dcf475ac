//! What `tram-build`'s own codec for flat messages calls: messages whose
//! fields are proto3 scalars, enums, strings and bytes, `optional` or
//! `repeated` ones included, oneofs of such fields, or messages of that
//! kind one level deep, single, repeated or a oneof's variant (no map
//! fields), which are most requests and responses of a busy service.
//!
//! prost decodes a message a field at a time through `impl Buf`, with a
//! call per varint and its checks on every key; for a two-field message
//! that is about 290 instructions, a sixth of a unary call's user-space
//! work (docs/performance.md, "Where the time goes"). The generated `merge`
//! for a flat message (which prost's `decode` calls, and tram's streams)
//! reads it instead from the buffer's one contiguous chunk with a
//! [`Reader`], every field's key matched as a constant, and takes its
//! `bytes` fields as slices of the buffer at the end, as it does each
//! element of a repeated `bytes` or message field; a repeated number is
//! read packed ([`extend_packed`]) or not, whichever it is. Anything it
//! does not expect (an unknown key, a message field or a oneof seen twice,
//! a wrong wire type, a truncated or overlong varint, a string that is not
//! UTF-8, a buffer in pieces) sends the whole message back to prost's own
//! decoding from the start ([`merge_with_prost`]), so the result, or the
//! error, is always prost's: a field read before is read again, to the same
//! value, and a repeated field is first cut back to the length it had.
//! Encoding writes each field's key and value with one copy rather than a
//! byte at a time; the bytes are prost's, in prost's order.

use ::prost::bytes::{Buf, BufMut, Bytes};
use ::prost::encoding::{DecodeContext, decode_key};
use ::prost::{DecodeError, Message};

use super::prost::encoding::bytes::BytesField;

/// The longest varint: ten bytes for 64 bits.
const MAX_VARINT: usize = tram_wire::varint::MAX_LEN;

/// Reads a flat message's fields from one contiguous buffer. Every method
/// returns `None` where prost's decoding would fail or differ, and the
/// caller then hands the message to prost.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Whether every byte has been read.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }

    /// The position of the next byte, from the start of the buffer.
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// A varint, as prost reads one: up to ten bytes, the tenth at most 1.
    /// tram-wire's `varint::decode` reads the same, but through its error
    /// type it cost a unary call about 160 more instructions here.
    #[inline(always)]
    pub fn varint(&mut self) -> Option<u64> {
        // The one-byte case first: keys under field 16 and small values.
        let &first = self.buf.get(self.pos)?;
        if first < 0x80 {
            self.pos += 1;
            return Some(u64::from(first));
        }
        let mut value = u64::from(first & 0x7f);
        for i in 1..MAX_VARINT {
            let &b = self.buf.get(self.pos + i)?;
            if i == MAX_VARINT - 1 && b > 1 {
                return None;
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.pos += i + 1;
                return Some(value);
            }
        }
        None
    }

    /// Four little-endian bytes.
    #[inline(always)]
    pub fn fixed32(&mut self) -> Option<u32> {
        let bytes = self.buf.get(self.pos..self.pos + 4)?;
        self.pos += 4;
        Some(u32::from_le_bytes(bytes.try_into().ok()?))
    }

    /// Eight little-endian bytes.
    #[inline(always)]
    pub fn fixed64(&mut self) -> Option<u64> {
        let bytes = self.buf.get(self.pos..self.pos + 8)?;
        self.pos += 8;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    }

    /// A length-delimited field's bytes, as (offset from the buffer's
    /// start, length).
    #[inline(always)]
    pub fn span(&mut self) -> Option<(usize, usize)> {
        let len = usize::try_from(self.varint()?).ok()?;
        let start = self.pos;
        if len > self.buf.len() - start {
            return None;
        }
        self.pos = start + len;
        Some((start, len))
    }

    /// A length-delimited field's bytes, borrowed.
    #[inline]
    pub fn slice(&mut self) -> Option<&'a [u8]> {
        let (start, len) = self.span()?;
        Some(&self.buf[start..start + len])
    }

    /// A string field: its bytes, which must be UTF-8.
    #[inline]
    pub fn string(&mut self) -> Option<String> {
        std::str::from_utf8(self.slice()?).ok().map(str::to_owned)
    }
}

/// Reads a packed record of numbers (a length-delimited field) from `r`,
/// each element with `read`, appending them to `out`; `None` where prost
/// would fail (the record runs past the buffer, an element past the
/// record's end), with what was appended left for the caller to take off.
/// `width`: the bytes of a fixed-width element, 0 for varints.
///
/// Room for the record's elements is made first, in one allocation: a
/// fixed-width record's length says how many, and a varint record has as
/// many as it has bytes under 0x80 (each varint's last).
#[inline]
pub fn extend_packed<'a, T>(
    r: &mut Reader<'a>,
    out: &mut Vec<T>,
    width: usize,
    mut read: impl FnMut(&mut Reader<'a>) -> Option<T>,
) -> Option<()> {
    let (start, len) = r.span()?;
    let bytes = &r.buf[start..start + len];
    out.reserve(match width {
        0 => bytes.iter().filter(|&&b| b < 0x80).count(),
        w => len / w,
    });
    let mut record = Reader::new(bytes);
    while !record.is_empty() {
        out.push(read(&mut record)?);
    }
    Some(())
}

/// Merges `buf` into `msg` as prost's own `Message::merge` does, a field
/// at a time: where a flat message's `merge` hands over what it does not
/// expect.
pub fn merge_with_prost(msg: &mut impl Message, mut buf: impl Buf) -> Result<(), DecodeError> {
    let ctx = DecodeContext::default();
    while buf.has_remaining() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        msg.merge_field(tag, wire_type, &mut buf, ctx.clone())?;
    }
    Ok(())
}

/// Takes the `bytes` fields a [`Reader`] found out of `buf` (at its start;
/// each span an offset from there and a length, `None` for a field the
/// message did not hold), in field order. Each is a slice of `buf` (of the
/// buffer a `Bytes` shares), taken in the order of their offsets, so that
/// the last, which usually ends the message, takes the rest of `buf`
/// without touching its count.
pub fn take_spans<const N: usize>(
    buf: &mut impl Buf,
    spans: [Option<(usize, usize)>; N],
) -> [Option<Bytes>; N] {
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    order.sort_unstable_by_key(|&i| spans[i].map_or(usize::MAX, |(start, _)| start));
    let mut taken: [Option<Bytes>; N] = std::array::from_fn(|_| None);
    let mut at = 0;
    for i in order {
        // Sorted by offset, absent fields last; the spans of different
        // fields never overlap.
        let Some((start, len)) = spans[i] else { break };
        buf.advance(start - at);
        taken[i] = Some(buf.copy_to_bytes(len));
        at = start + len;
    }
    taken
}

/// An enum field's `Debug`, as prost's: the enum's value where the number
/// is one of its own, the number otherwise.
pub struct EnumDebug<E>(i32, std::marker::PhantomData<E>);

impl<E> EnumDebug<E> {
    /// The field's number.
    pub fn new(value: i32) -> Self {
        EnumDebug(value, std::marker::PhantomData)
    }
}

impl<E: TryFrom<i32> + std::fmt::Debug> std::fmt::Debug for EnumDebug<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match E::try_from(self.0) {
            Ok(e) => e.fmt(f),
            Err(_) => self.0.fmt(f),
        }
    }
}

/// The bytes of a varint.
pub use tram_wire::varint::encoded_len as varint_len;

/// Writes `key` (a field's key, encoded) and then `value` as a varint, in
/// one copy of a constant length (a copy of a length known only at run
/// time is a call to `memcpy`, which costs more than the bytes).
#[inline(always)]
pub fn put_varint(buf: &mut impl BufMut, key: &[u8], value: u64) {
    let mut out = [0u8; 2 * MAX_VARINT];
    let k = key.len();
    out[..k].copy_from_slice(key);
    let n = k + tram_wire::varint::write(&mut out[k..], value);
    put_short(buf, &out, n);
}

/// Puts `out[..n]` with a copy of constant length.
#[inline(always)]
fn put_short(buf: &mut impl BufMut, out: &[u8; 2 * MAX_VARINT], n: usize) {
    macro_rules! by_length {
        ($($len:literal)*) => {
            match n {
                $($len => buf.put_slice(&out[..$len]),)*
                _ => buf.put_slice(&out[..n]),
            }
        };
    }
    by_length!(1 2 3 4 5 6 7 8 9 10 11 12);
}

/// Writes `key` and then a fixed-width field's little-endian bytes
/// (`to_le_bytes` of its `u32` or `u64`).
#[inline]
pub fn put_fixed<const N: usize>(buf: &mut impl BufMut, key: &[u8], value: [u8; N]) {
    buf.put_slice(key);
    buf.put_slice(&value);
}

/// Writes `key`, the length of `value` and its bytes (a large `Bytes` by
/// reference, as tram's `bytes` fields are; see [`BytesField`]).
#[inline]
pub fn put_bytes(buf: &mut impl BufMut, key: &[u8], value: &(impl BytesField + ?Sized)) {
    put_varint(buf, key, value.as_slice().len() as u64);
    value.append_to(buf);
}

/// Writes `key`, the length of `value` and its bytes.
#[inline]
pub fn put_str(buf: &mut impl BufMut, key: &[u8], value: &str) {
    put_varint(buf, key, value.len() as u64);
    buf.put_slice(value.as_bytes());
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn varints_read_and_write_as_prosts_do(value in any::<u64>(), key in 1u32..(1 << 29)) {
            let mut ours = Vec::new();
            let mut k = Vec::new();
            ::prost::encoding::encode_varint(u64::from(key << 3), &mut k);
            put_varint(&mut ours, &k, value);
            let mut prost = Vec::new();
            ::prost::encoding::encode_varint(u64::from(key << 3), &mut prost);
            ::prost::encoding::encode_varint(value, &mut prost);
            prop_assert_eq!(&ours, &prost);
            prop_assert_eq!(varint_len(value), ::prost::encoding::encoded_len_varint(value));
            let mut r = Reader::new(&ours);
            prop_assert_eq!(r.varint(), Some(u64::from(key << 3)));
            prop_assert_eq!(r.varint(), Some(value));
            prop_assert!(r.is_empty());
        }

        #[test]
        fn any_bytes_read_as_a_varint_agree_with_prost(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let ours = Reader::new(&bytes).varint();
            let mut slice = &bytes[..];
            let prost = ::prost::encoding::decode_varint(&mut slice).ok();
            prop_assert_eq!(ours, prost);
        }
    }

    #[test]
    fn truncated_and_overlong_varints_are_left_to_prost() {
        assert_eq!(Reader::new(&[0x80]).varint(), None);
        assert_eq!(Reader::new(&[0xff; 10]).varint(), None);
        let mut ten = [0xff; 10];
        ten[9] = 0x01;
        assert_eq!(Reader::new(&ten).varint(), Some(u64::MAX));
        ten[9] = 0x02;
        assert_eq!(Reader::new(&ten).varint(), None);
    }

    #[test]
    fn spans_are_taken_in_field_order_and_the_last_without_a_count() {
        let buf = Bytes::from_static(b"aabbbc");
        let mut rest = buf.clone();
        let [first, second, none, third] =
            take_spans(&mut rest, [Some((2, 3)), Some((0, 2)), None, Some((5, 1))]);
        assert_eq!(first.as_deref(), Some(&b"bbb"[..]));
        assert_eq!(second.as_deref(), Some(&b"aa"[..]));
        assert_eq!(none, None);
        assert_eq!(third.as_deref(), Some(&b"c"[..]));
        assert!(rest.is_empty());
    }

    #[test]
    fn a_packed_record_is_read_whole_or_not_at_all() {
        // Two varints (1, 300) in a record of three bytes, then a byte after.
        let mut r = Reader::new(&[3, 0x01, 0xac, 0x02, 0x07]);
        let mut out = Vec::new();
        assert_eq!(extend_packed(&mut r, &mut out, 0, Reader::varint), Some(()));
        assert_eq!(out, [1, 300]);
        assert_eq!(r.position(), 4);
        // A varint running past the record's end fails, as in prost.
        let mut r = Reader::new(&[2, 0x01, 0xac, 0x02]);
        assert_eq!(
            extend_packed(&mut r, &mut Vec::new(), 0, Reader::varint),
            None
        );
        // So does a fixed-width record whose length is not a multiple.
        let mut r = Reader::new(&[5, 1, 0, 0, 0, 2]);
        assert_eq!(
            extend_packed(&mut r, &mut Vec::new(), 4, Reader::fixed32),
            None
        );
        // And a record longer than the buffer.
        let mut r = Reader::new(&[9, 1]);
        assert_eq!(
            extend_packed(&mut r, &mut Vec::new(), 0, Reader::varint),
            None
        );
    }

    #[test]
    fn spans_stay_inside_the_buffer() {
        assert_eq!(Reader::new(&[3, 1, 2]).span(), None);
        let mut r = Reader::new(&[2, 1, 2, 0]);
        assert_eq!(r.span(), Some((1, 2)));
        assert_eq!(r.position(), 3);
        assert_eq!(Reader::new(&[2, 0xff, 0xfe]).string(), None);
    }
}
