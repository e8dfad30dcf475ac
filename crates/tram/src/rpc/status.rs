//! The outcome of a call that did not succeed.

use std::fmt;

use bytes::Bytes;
use tram_wire::{Code, Metadata};

/// A call's error status: one of gRPC's 17 codes, a message, optional
/// details and trailing metadata. One pointer wide.
///
/// [`Status::is_remote`] tells a status the peer sent (a handler's error, or
/// the server refusing the call) from one produced locally: the connection
/// was lost ([`Code::Unavailable`]), the deadline passed
/// ([`Code::DeadlineExceeded`]), the call was cancelled
/// ([`Code::Cancelled`]), or the peer broke the protocol
/// ([`Code::Internal`]).
#[derive(Clone)]
pub struct Status {
    inner: Box<Inner>,
}

#[derive(Clone)]
struct Inner {
    code: Code,
    message: String,
    details: Bytes,
    trailers: Metadata,
    remote: bool,
    /// The call never reached a server (or one refused it unprocessed):
    /// it may be sent again, idempotent or not.
    not_sent: bool,
}

impl Status {
    /// A status with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            inner: Box::new(Inner {
                code,
                message: message.into(),
                details: Bytes::new(),
                trailers: Metadata::new(),
                remote: false,
                not_sent: false,
            }),
        }
    }

    /// Adds opaque details (gRPC puts a serialized `google.rpc.Status` here).
    pub fn with_details(mut self, details: Bytes) -> Status {
        self.inner.details = details;
        self
    }

    /// Adds trailing metadata.
    pub fn with_trailers(mut self, trailers: Metadata) -> Status {
        self.inner.trailers = trailers;
        self
    }

    /// The code.
    pub fn code(&self) -> Code {
        self.inner.code
    }

    /// The message (may be empty).
    pub fn message(&self) -> &str {
        &self.inner.message
    }

    /// The details (empty if none).
    pub fn details(&self) -> &Bytes {
        &self.inner.details
    }

    /// The trailing metadata.
    pub fn trailers(&self) -> &Metadata {
        &self.inner.trailers
    }

    /// Whether the peer sent this status, rather than it being produced here.
    pub fn is_remote(&self) -> bool {
        self.inner.remote
    }

    /// Whether the call certainly did not reach a server's handler: it
    /// was refused before it was sent (no connection), or the server
    /// refused it unprocessed (it was going away). Such a call can be made
    /// again safely, idempotent or not; tram does so itself on another
    /// endpoint within the call's deadline.
    pub fn is_unprocessed(&self) -> bool {
        self.inner.not_sent
    }

    /// Marks the status as that of a call that never reached a handler.
    pub(crate) fn not_sent(mut self) -> Status {
        self.inner.not_sent = true;
        self
    }

    pub(crate) fn from_wire(end: tram_wire::End) -> Status {
        Status {
            inner: Box::new(Inner {
                code: end.code,
                message: end.message.unwrap_or_default(),
                details: end.details.unwrap_or_default(),
                trailers: end.trailers.unwrap_or_default(),
                remote: true,
                not_sent: false,
            }),
        }
    }

    pub(crate) fn to_wire(&self, call: tram_wire::CallId) -> tram_wire::End {
        let i = &*self.inner;
        tram_wire::End {
            call,
            code: i.code,
            message: (!i.message.is_empty()).then(|| i.message.clone()),
            details: (!i.details.is_empty()).then(|| i.details.clone()),
            trailers: (!i.trailers.is_empty()).then(|| i.trailers.clone()),
        }
    }
}

macro_rules! constructors {
    ($($(#[$doc:meta])* $name:ident => $code:ident,)*) => {
        impl Status {
            $(
                $(#[$doc])*
                pub fn $name(message: impl Into<String>) -> Status {
                    Status::new(Code::$code, message)
                }
            )*
        }
    };
}

constructors! {
    /// [`Code::Cancelled`].
    cancelled => Cancelled,
    /// [`Code::Unknown`].
    unknown => Unknown,
    /// [`Code::InvalidArgument`].
    invalid_argument => InvalidArgument,
    /// [`Code::DeadlineExceeded`].
    deadline_exceeded => DeadlineExceeded,
    /// [`Code::NotFound`].
    not_found => NotFound,
    /// [`Code::AlreadyExists`].
    already_exists => AlreadyExists,
    /// [`Code::PermissionDenied`].
    permission_denied => PermissionDenied,
    /// [`Code::ResourceExhausted`].
    resource_exhausted => ResourceExhausted,
    /// [`Code::FailedPrecondition`].
    failed_precondition => FailedPrecondition,
    /// [`Code::Aborted`].
    aborted => Aborted,
    /// [`Code::OutOfRange`].
    out_of_range => OutOfRange,
    /// [`Code::Unimplemented`].
    unimplemented => Unimplemented,
    /// [`Code::Internal`].
    internal => Internal,
    /// [`Code::Unavailable`].
    unavailable => Unavailable,
    /// [`Code::DataLoss`].
    data_loss => DataLoss,
    /// [`Code::Unauthenticated`].
    unauthenticated => Unauthenticated,
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &*self.inner;
        let mut d = f.debug_struct("Status");
        d.field("code", &i.code).field("message", &i.message);
        if !i.details.is_empty() {
            d.field("details", &i.details);
        }
        if !i.trailers.is_empty() {
            d.field("trailers", &i.trailers);
        }
        d.field("remote", &i.remote).finish()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = if self.inner.remote { "" } else { " (local)" };
        if self.inner.message.is_empty() {
            write!(f, "{}{origin}", self.inner.code)
        } else {
            write!(f, "{}{origin}: {}", self.inner.code, self.inner.message)
        }
    }
}

impl std::error::Error for Status {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Status>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn wire_round_trip_keeps_everything() {
        let md = Metadata::builder().ascii("k", "v").unwrap().build();
        let s = Status::not_found("no such key")
            .with_details(Bytes::from_static(b"\x08\x05"))
            .with_trailers(md.clone());
        let back = Status::from_wire(s.to_wire(3));
        assert_eq!(back.code(), Code::NotFound);
        assert_eq!(back.message(), "no such key");
        assert_eq!(&back.details()[..], b"\x08\x05");
        assert_eq!(back.trailers(), &md);
        assert!(back.is_remote() && !s.is_remote());
        assert_eq!(back.to_string(), "NOT_FOUND: no such key");
    }
}
