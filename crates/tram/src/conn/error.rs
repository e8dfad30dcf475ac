//! The message-stream error type.

use std::{fmt, io};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error on a message stream. One pointer wide; see [`Error::kind`].
pub struct Error {
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    source: Option<BoxError>,
}

/// What went wrong, for matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading or writing the transport failed.
    Io,
    /// The peer sent bytes the codec rejects; the connection is unusable.
    Decode,
    /// A message could not be encoded; nothing of it was queued.
    Encode,
    /// The peer sent more than the maximum message size without completing
    /// a message.
    TooLarge,
    /// The peer closed the connection in the middle of a message.
    Truncated,
    /// The connection is closed (by us, the peer, or an earlier error).
    Closed,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, source: Option<BoxError>) -> Self {
        Error {
            inner: Box::new(Inner { kind, source }),
        }
    }

    pub(crate) fn decode(e: impl Into<BoxError>) -> Self {
        Error::new(ErrorKind::Decode, Some(e.into()))
    }

    pub(crate) fn encode(e: impl Into<BoxError>) -> Self {
        Error::new(ErrorKind::Encode, Some(e.into()))
    }

    pub(crate) fn closed() -> Self {
        Error::new(ErrorKind::Closed, None)
    }

    /// What kind of error this is.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// The codec's or the transport's own error, if it is of type `E`.
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.inner.source.as_ref()?.downcast_ref()
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::new(ErrorKind::Io, Some(e.into()))
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.inner.kind);
        if let Some(s) = &self.inner.source {
            d.field("source", s);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.inner.kind {
            ErrorKind::Io => "i/o error",
            ErrorKind::Decode => "malformed input from peer",
            ErrorKind::Encode => "could not encode message",
            ErrorKind::TooLarge => "message exceeds the maximum size",
            ErrorKind::Truncated => "connection closed in the middle of a message",
            ErrorKind::Closed => "connection closed",
        };
        match &self.inner.source {
            Some(s) => write!(f, "{what}: {s}"),
            None => f.write_str(what),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.inner.source.as_deref().map(|e| e as _)
    }
}

/// Why [`Sender::try_send`](super::Sender::try_send) did not queue a
/// message; the message is handed back.
#[derive(Debug)]
pub enum TrySendError<T> {
    /// The outbound queue is at its byte limit; try again later or use
    /// [`Sender::send`](super::Sender::send), which waits.
    Full(T),
    /// The connection is closed.
    Closed(T),
    /// The codec failed; nothing was queued.
    Encode(Error),
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("outbound queue full"),
            TrySendError::Closed(_) => f.write_str("connection closed"),
            TrySendError::Encode(e) => e.fmt(f),
        }
    }
}

impl<T: fmt::Debug> std::error::Error for TrySendError<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Error>(), std::mem::size_of::<usize>());
    }
}
