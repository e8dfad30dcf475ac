//! Metadata blocks: the key/value pairs on CALL (headers) and END (trailers).
//!
//! On the wire a block is a sequence of entries, each
//! `varint key_len, key, varint value_len, value`. Keys are lowercase ASCII
//! (`a-z 0-9 - _ .`); a key ending in `-bin` has a binary value, any other key
//! a printable-ASCII value (0x20..=0x7e), the same rules as gRPC's headers so
//! that the gateway maps them one to one.
//!
//! A decoded [`Metadata`] is a validated slice of the frame it came in: no
//! copy and no allocation per entry.

use bytes::{BufMut, Bytes, BytesMut};

use crate::{Error, varint};

/// A validated, immutable metadata block.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    raw: Bytes,
}

impl Metadata {
    /// An empty block.
    pub const fn new() -> Self {
        Metadata { raw: Bytes::new() }
    }

    /// Starts a block to fill entry by entry.
    pub fn builder() -> MetadataBuilder {
        MetadataBuilder::default()
    }

    /// Wraps an encoded block after checking every entry.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidMetadata`] if an entry is truncated or breaks the key
    /// or value rules.
    pub fn from_raw(raw: Bytes) -> Result<Self, Error> {
        Metadata::validate(&raw)?;
        Ok(Metadata { raw })
    }

    /// Checks an encoded block without taking it.
    pub(crate) fn validate(mut rest: &[u8]) -> Result<(), Error> {
        while !rest.is_empty() {
            let (key, value, tail) = split_entry(rest)?;
            check_key(key)?;
            if !key.ends_with(b"-bin") {
                check_ascii_value(value)?;
            }
            rest = tail;
        }
        Ok(())
    }

    /// Wraps a block that [`Metadata::validate`] accepted.
    pub(crate) fn from_validated(raw: Bytes) -> Self {
        Metadata { raw }
    }

    /// The encoded block.
    pub fn as_bytes(&self) -> &Bytes {
        &self.raw
    }

    /// The size of the encoded block in bytes (what limits count).
    pub fn encoded_len(&self) -> usize {
        self.raw.len()
    }

    /// Whether the block has no entries.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// A builder holding this block's entries, to add more to.
    pub fn to_builder(&self) -> MetadataBuilder {
        MetadataBuilder {
            buf: BytesMut::from(&self.raw[..]),
        }
    }

    /// The entries in wire order; a key may repeat.
    pub fn iter(&self) -> Iter<'_> {
        Iter { rest: &self.raw }
    }

    /// The value of the first entry with this key.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        // Compared as bytes: a server asks every call's block for its trace
        // context, and the keys need no UTF-8 check to be compared.
        let mut rest = &self.raw[..];
        while !rest.is_empty() {
            let (k, value, tail) = split_entry(rest).ok()?;
            if k == key.as_bytes() {
                return Some(value);
            }
            rest = tail;
        }
        None
    }

    /// This block's entries followed by `more`'s, as one block (no entry is
    /// checked again: both blocks were).
    pub fn concat(&self, more: &Metadata) -> Metadata {
        if more.is_empty() {
            return self.clone();
        }
        if self.is_empty() {
            return more.clone();
        }
        let mut raw = BytesMut::with_capacity(self.raw.len() + more.raw.len());
        raw.put_slice(&self.raw);
        raw.put_slice(&more.raw);
        Metadata { raw: raw.freeze() }
    }
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for (k, v) in self.iter() {
            if k.ends_with("-bin") {
                map.entry(&k, &v);
            } else {
                map.entry(&k, &String::from_utf8_lossy(v));
            }
        }
        map.finish()
    }
}

impl<'a> IntoIterator for &'a Metadata {
    type Item = (&'a str, &'a [u8]);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Iterator over a block's `(key, value)` entries.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        // The block was validated when it was built, so every entry parses
        // and every key is ASCII; stop rather than panic if not.
        let (key, value, tail) = split_entry(self.rest).ok()?;
        self.rest = tail;
        Some((std::str::from_utf8(key).ok()?, value))
    }
}

/// Builds a [`Metadata`] block, checking each entry as it is added.
#[derive(Debug, Default)]
pub struct MetadataBuilder {
    buf: BytesMut,
}

impl MetadataBuilder {
    /// Adds an ASCII entry.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidMetadata`] if the key is not a valid non-binary key or
    /// the value is not printable ASCII.
    pub fn ascii(&mut self, key: &str, value: &str) -> Result<&mut Self, Error> {
        check_key(key.as_bytes())?;
        if key.ends_with("-bin") {
            return Err(Error::InvalidMetadata("ASCII entry with a -bin key"));
        }
        check_ascii_value(value.as_bytes())?;
        self.push(key.as_bytes(), value.as_bytes());
        Ok(self)
    }

    /// Adds a binary entry; the key must end in `-bin`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidMetadata`] if the key is invalid or lacks `-bin`.
    pub fn binary(&mut self, key: &str, value: &[u8]) -> Result<&mut Self, Error> {
        check_key(key.as_bytes())?;
        if !key.ends_with("-bin") {
            return Err(Error::InvalidMetadata("binary entry without a -bin key"));
        }
        self.push(key.as_bytes(), value);
        Ok(self)
    }

    /// Adds every entry of `block`, in its order.
    pub fn extend(&mut self, block: &Metadata) -> &mut Self {
        self.buf.extend_from_slice(&block.raw);
        self
    }

    /// The size the block has so far, in bytes.
    pub fn encoded_len(&self) -> usize {
        self.buf.len()
    }

    /// Finishes the block.
    pub fn build(&mut self) -> Metadata {
        Metadata {
            raw: self.buf.split().freeze(),
        }
    }

    fn push(&mut self, key: &[u8], value: &[u8]) {
        self.buf.reserve(
            varint::encoded_len(key.len() as u64)
                + key.len()
                + varint::encoded_len(value.len() as u64)
                + value.len(),
        );
        varint::put(&mut self.buf, key.len() as u64);
        self.buf.put_slice(key);
        varint::put(&mut self.buf, value.len() as u64);
        self.buf.put_slice(value);
    }
}

/// The first entry of a block: key, value, and the rest of the block.
type Entry<'a> = (&'a [u8], &'a [u8], &'a [u8]);

/// Splits the first entry off `src`.
fn split_entry(src: &[u8]) -> Result<Entry<'_>, Error> {
    let (key, rest) = split_field(src)?;
    let (value, rest) = split_field(rest)?;
    Ok((key, value, rest))
}

fn split_field(src: &[u8]) -> Result<(&[u8], &[u8]), Error> {
    let (len, n) =
        varint::read(src).map_err(|_| Error::InvalidMetadata("entry length truncated"))?;
    let rest = &src[n..];
    let len = usize::try_from(len)
        .ok()
        .filter(|&len| len <= rest.len())
        .ok_or(Error::InvalidMetadata("entry runs past the block"))?;
    Ok(rest.split_at(len))
}

/// The bytes a key may hold: `a-z 0-9 - _ .`.
const KEY_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = matches!(b as u8, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.');
        b += 1;
    }
    table
};

// The checks below look at every byte without stopping at the first bad
// one: a server checks every entry of every call's metadata, nearly always
// valid, and a loop without an early exit runs without a branch a byte
// (the value's, vectorised).

fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.is_empty() {
        return Err(Error::InvalidMetadata("empty key"));
    }
    if !key
        .iter()
        .fold(true, |ok, &b| ok & KEY_BYTES[usize::from(b)])
    {
        return Err(Error::InvalidMetadata(
            "key has a character outside a-z 0-9 - _ .",
        ));
    }
    Ok(())
}

fn check_ascii_value(value: &[u8]) -> Result<(), Error> {
    // Eight bytes at a time: in a word whose bytes are all 0x20..=0x7e,
    // subtracting 0x20 from each borrows nowhere and adding 1 to each
    // carries nowhere, so no byte's high bit is set by either or by the
    // byte itself; a byte below 0x20 sets it in `w - 0x20.. & !w`, one
    // above 0x7e in `w + 0x01.. | w`.
    const LOW: u64 = 0x2020_2020_2020_2020;
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = value.chunks_exact(8);
    let mut high = 0u64;
    for chunk in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        let w = u64::from_le_bytes(bytes);
        high |= (w.wrapping_sub(LOW) & !w) | w.wrapping_add(ONES) | w;
    }
    // The rest one byte at a time: printable is `b - 0x20` (wrapping)
    // below 0x5f.
    let rest = words
        .remainder()
        .iter()
        .fold(0u8, |bad, &b| bad | u8::from(b.wrapping_sub(0x20) >= 0x5f));
    if high & HIGH == 0 && rest == 0 {
        Ok(())
    } else {
        Err(Error::InvalidMetadata(
            "ASCII value has a non-printable byte",
        ))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The checks that look at every byte accept exactly what the
        /// rules say.
        #[test]
        fn checks_accept_exactly_the_rules(
            bytes in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..80),
                "[ -~]{0,80}".prop_map(String::into_bytes),
                "[a-z0-9._-]{0,30}".prop_map(String::into_bytes),
                ("[a-z0-9._-]{0,30}", any::<u8>()).prop_map(|(k, b)| [k.as_bytes(), &[b]].concat()),
                ("[ -~]{0,80}", any::<u8>()).prop_map(|(v, b)| [&[b], v.as_bytes()].concat()),
            ],
        ) {
            let printable = bytes.iter().all(|b| (0x20..=0x7e).contains(b));
            prop_assert_eq!(check_ascii_value(&bytes).is_ok(), printable);
            let key = !bytes.is_empty()
                && bytes
                    .iter()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.'));
            prop_assert_eq!(check_key(&bytes).is_ok(), key);
        }
    }

    #[test]
    fn blocks_join_and_extend_in_order() {
        let a = Metadata::builder().ascii("a", "1").unwrap().build();
        let b = Metadata::builder()
            .ascii("b", "2")
            .unwrap()
            .binary("c-bin", &[0, 1])
            .unwrap()
            .build();
        let joined = a.concat(&b);
        let entries: Vec<_> = joined.iter().collect();
        assert_eq!(
            entries,
            vec![("a", &b"1"[..]), ("b", &b"2"[..]), ("c-bin", &[0u8, 1][..])]
        );
        assert_eq!(
            Metadata::from_raw(joined.as_bytes().clone()).unwrap(),
            joined
        );
        assert_eq!(a.concat(&Metadata::new()), a);
        assert_eq!(Metadata::new().concat(&b), b);
        let mut extended = a.to_builder();
        extended.extend(&b).ascii("d", "4").unwrap();
        let extended = extended.build();
        assert_eq!(extended.iter().count(), 4);
        assert_eq!(extended.get("c-bin"), Some(&[0u8, 1][..]));
        assert_eq!(extended.get("d"), Some(&b"4"[..]));
        assert_eq!(extended.get("e"), None);
    }

    #[test]
    fn build_and_iterate() {
        let md = Metadata::builder()
            .ascii("authorization", "Bearer abc")
            .unwrap()
            .binary("trace-bin", &[0, 255, 10])
            .unwrap()
            .ascii("x", "1")
            .unwrap()
            .build();
        let entries: Vec<_> = md.iter().collect();
        assert_eq!(
            entries,
            vec![
                ("authorization", &b"Bearer abc"[..]),
                ("trace-bin", &[0u8, 255, 10][..]),
                ("x", &b"1"[..]),
            ]
        );
        assert_eq!(md.get("x"), Some(&b"1"[..]));
        assert_eq!(md.get("missing"), None);
        // Re-validating the encoded form accepts it unchanged.
        assert_eq!(Metadata::from_raw(md.as_bytes().clone()).unwrap(), md);
    }

    #[test]
    fn rejects_bad_entries() {
        let mut b = Metadata::builder();
        assert!(b.ascii("Upper", "v").is_err());
        assert!(b.ascii("", "v").is_err());
        assert!(b.ascii("k", "new\nline").is_err());
        assert!(b.ascii("k-bin", "v").is_err());
        assert!(b.binary("k", b"v").is_err());
        // Nothing invalid was added.
        assert!(b.build().is_empty());

        for raw in [
            &[0x05, b'a'][..],             // key runs past the block
            &[0x01, b'a'][..],             // value length missing
            &[0x01, b'a', 0x02, b'x'][..], // value runs past the block
            &[0x01, b'A', 0x00][..],       // uppercase key
            &[0x01, b'a', 0x01, 0x07][..], // control byte in ASCII value
            &[0x00, 0x00][..],             // empty key
            &[0x01, b'a', 0x80][..],       // truncated varint
        ] {
            assert!(
                Metadata::from_raw(Bytes::copy_from_slice(raw)).is_err(),
                "{raw:?} should be rejected"
            );
        }
    }
}
