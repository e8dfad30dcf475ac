//! Newline-separated JSON messages (serde_json).

use crate::conn::WriteBuf;
use std::marker::PhantomData;

use bytes::{BufMut, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Decoder, Encoder};

/// JSON values, one per line (`\n`, optionally preceded by `\r`).
///
/// Decodes `In` and encodes `Out`. Blank lines are skipped. A line longer
/// than the maximum is rejected as soon as that many bytes arrive without a
/// newline. Each byte is scanned for the newline once, however the line is
/// split across reads.
pub struct JsonLines<In, Out = In> {
    max_line: usize,
    /// Bytes at the front of the buffer already known to hold no newline.
    scanned: usize,
    _types: PhantomData<fn(Out) -> In>,
}

/// A JSON line that could not be decoded or encoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// A line exceeds the maximum length.
    #[error("line of more than {max} bytes")]
    TooLong {
        /// The codec's maximum.
        max: usize,
    },
    /// The line is not valid JSON for the expected type.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

impl<In, Out> JsonLines<In, Out> {
    /// The default maximum line length: 1 MiB.
    pub const DEFAULT_MAX_LINE: usize = 1 << 20;

    /// A codec with the default maximum line length.
    pub fn new() -> Self {
        Self::with_max_line(Self::DEFAULT_MAX_LINE)
    }

    /// A codec that rejects lines over `max_line` bytes.
    pub fn with_max_line(max_line: usize) -> Self {
        JsonLines {
            max_line,
            scanned: 0,
            _types: PhantomData,
        }
    }
}

impl<In, Out> Default for JsonLines<In, Out> {
    fn default() -> Self {
        Self::new()
    }
}

impl<In, Out> Clone for JsonLines<In, Out> {
    fn clone(&self) -> Self {
        Self::with_max_line(self.max_line)
    }
}

impl<In, Out> std::fmt::Debug for JsonLines<In, Out> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonLines")
            .field("max_line", &self.max_line)
            .finish()
    }
}

impl<In: DeserializeOwned, Out> Decoder for JsonLines<In, Out> {
    type Item = In;
    type Error = JsonError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<In>, JsonError> {
        loop {
            let Some(pos) = memchr::memchr(b'\n', &src[self.scanned..]) else {
                self.scanned = src.len();
                if src.len() > self.max_line {
                    return Err(JsonError::TooLong { max: self.max_line });
                }
                return Ok(None);
            };
            let end = self.scanned + pos;
            self.scanned = 0;
            if end > self.max_line {
                return Err(JsonError::TooLong { max: self.max_line });
            }
            let line = src.split_to(end + 1);
            let text = line[..end].strip_suffix(b"\r").unwrap_or(&line[..end]);
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(serde_json::from_slice(text)?));
        }
    }
}

impl<In, Out: Serialize> Encoder<Out> for JsonLines<In, Out> {
    type Error = JsonError;

    fn encode(&mut self, item: Out, dst: &mut WriteBuf) -> Result<(), JsonError> {
        let start = dst.len();
        // serde_json escapes newlines inside strings, so the only raw
        // newline is the separator. On an error the queue drops what was
        // written.
        serde_json::to_writer(dst.writer(), &item)?;
        if dst.len() - start > self.max_line {
            return Err(JsonError::TooLong { max: self.max_line });
        }
        dst.put_u8(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_anywhere() {
        let mut enc = JsonLines::<serde_json::Value>::new();
        let mut wire = WriteBuf::default();
        for v in [serde_json::json!({"a": "x\ny"}), serde_json::json!([1, 2])] {
            enc.encode(v, &mut wire).unwrap();
        }
        let mut with_blank = BytesMut::from(&b"\r\n"[..]);
        with_blank.extend_from_slice(wire.contiguous());
        for split in 1..with_blank.len() {
            let mut dec = JsonLines::<serde_json::Value>::new();
            let mut buf = BytesMut::new();
            let mut out = Vec::new();
            for piece in with_blank.chunks(split) {
                buf.extend_from_slice(piece);
                while let Some(v) = dec.decode(&mut buf).unwrap() {
                    out.push(v);
                }
            }
            assert_eq!(out.len(), 2, "split {split}");
            assert_eq!(out[0]["a"], "x\ny");
        }
    }

    #[test]
    fn rejects_long_lines_and_bad_json() {
        let mut dec = JsonLines::<serde_json::Value>::with_max_line(8);
        let mut buf = BytesMut::from(&b"123456789"[..]);
        assert!(matches!(
            dec.decode(&mut buf),
            Err(JsonError::TooLong { .. })
        ));
        let mut dec = JsonLines::<u32>::new();
        let mut buf = BytesMut::from(&b"\"x\"\n"[..]);
        assert!(matches!(dec.decode(&mut buf), Err(JsonError::Json(_))));
    }
}
