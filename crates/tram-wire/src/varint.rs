//! Unsigned LEB128 varints, as protobuf writes them.
//!
//! Decoding is bounded: a varint is at most [`MAX_LEN`] bytes and its value
//! must fit in a `u64`; anything longer or larger is rejected instead of
//! waiting for more input.

use bytes::BufMut;

/// The longest varint this protocol accepts (a full `u64`).
pub const MAX_LEN: usize = 10;

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VarintError {
    /// The input ended before the varint's last byte.
    Incomplete,
    /// More than [`MAX_LEN`] bytes, or a value above `u64::MAX`.
    Overflow,
}

/// The number of bytes `value` takes as a varint.
#[inline]
pub const fn encoded_len(value: u64) -> usize {
    // Each byte carries 7 bits; a zero still takes one byte. bits * 9 / 64
    // rounds up bits / 7 for every bit count to 64, without a division
    // (this is on every frame's and every flat message's encode).
    let bits = 64 - (value | 1).leading_zeros() as usize;
    (bits * 9 + 64) / 64
}

/// Appends `value` as a varint.
#[inline]
pub fn put<B: BufMut + ?Sized>(dst: &mut B, value: u64) {
    if value < 0x80 {
        dst.put_u8(value as u8);
        return;
    }
    // Build it on the stack and copy once: one bounds check, not one per byte.
    let mut buf = [0u8; MAX_LEN];
    let n = write(&mut buf, value);
    dst.put_slice(&buf[..n]);
}

/// Writes `value` as a varint at the start of `out` and returns its
/// length.
///
/// # Panics
///
/// If `out` is shorter than the varint ([`MAX_LEN`] bytes always do).
#[inline]
pub fn write(out: &mut [u8], mut value: u64) -> usize {
    let mut n = 0;
    while value >= 0x80 {
        out[n] = (value as u8) | 0x80;
        value >>= 7;
        n += 1;
    }
    out[n] = value as u8;
    n + 1
}

/// Reads a varint from the front of `src`, returning it and its length, or
/// `Ok(None)` if `src` ends before the varint does.
///
/// # Errors
///
/// [`Error::VarintOverflow`](crate::Error::VarintOverflow) for more than
/// [`MAX_LEN`] bytes or a value above `u64::MAX`.
#[inline]
pub fn decode(src: &[u8]) -> Result<Option<(u64, usize)>, crate::Error> {
    match read(src) {
        Ok(v) => Ok(Some(v)),
        Err(VarintError::Incomplete) => Ok(None),
        Err(VarintError::Overflow) => Err(crate::Error::VarintOverflow),
    }
}

/// Reads a varint from the front of `src`, returning it and its length.
#[inline]
pub(crate) fn read(src: &[u8]) -> Result<(u64, usize), VarintError> {
    // Fast path: the common one-byte varint.
    match src.first() {
        None => return Err(VarintError::Incomplete),
        Some(&b) if b < 0x80 => return Ok((u64::from(b), 1)),
        Some(_) => {}
    }
    let mut value = 0u64;
    for (i, &b) in src.iter().take(MAX_LEN).enumerate() {
        if i == MAX_LEN - 1 && b > 1 {
            // The tenth byte may only hold the top bit of a u64.
            return Err(VarintError::Overflow);
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((value, i + 1));
        }
    }
    if src.len() >= MAX_LEN {
        Err(VarintError::Overflow)
    } else {
        Err(VarintError::Incomplete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put(&mut out, v);
        out
    }

    #[test]
    fn edges_round_trip() {
        let cases: [(u64, &[u8]); 6] = [
            (0, &[0x00]),
            (1, &[0x01]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (300, &[0xac, 0x02]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ];
        for (value, bytes) in cases {
            assert_eq!(enc(value), bytes, "encoding {value}");
            assert_eq!(encoded_len(value), bytes.len(), "length of {value}");
            assert_eq!(read(bytes), Ok((value, bytes.len())), "decoding {value}");
        }
    }

    #[test]
    fn incomplete_and_overflow() {
        assert_eq!(read(&[]), Err(VarintError::Incomplete));
        assert_eq!(read(&[0x80]), Err(VarintError::Incomplete));
        assert_eq!(read(&[0xff; 9]), Err(VarintError::Incomplete));
        assert_eq!(read(&[0xff; 10]), Err(VarintError::Overflow));
        assert_eq!(read(&[0xff; 64]), Err(VarintError::Overflow));
        // Tenth byte above 1 overflows a u64.
        let mut v = vec![0xff; 9];
        v.push(0x02);
        assert_eq!(read(&v), Err(VarintError::Overflow));
    }

    #[test]
    fn lengths_match_encoding() {
        for shift in 0..64 {
            for v in [1u64 << shift, (1u64 << shift) - 1, (1u64 << shift) + 1] {
                assert_eq!(encoded_len(v), enc(v).len(), "value {v}");
            }
        }
    }
}
