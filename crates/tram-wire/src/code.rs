//! Status codes carried by END and CANCEL, and GOAWAY reasons.

use std::fmt;

/// A call's status code: gRPC's 17 codes, with gRPC's numbers.
///
/// Any other number on the wire is a protocol error
/// ([`Error::InvalidCode`](crate::Error::InvalidCode)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Code {
    /// Not an error.
    Ok = 0,
    /// The call was cancelled, usually by the caller.
    Cancelled = 1,
    /// An error that fits no other code.
    Unknown = 2,
    /// The caller sent an argument that is invalid whatever the state.
    InvalidArgument = 3,
    /// The deadline expired before the call completed.
    DeadlineExceeded = 4,
    /// A requested entity was not found.
    NotFound = 5,
    /// The entity the caller tried to create already exists.
    AlreadyExists = 6,
    /// The caller may not do this.
    PermissionDenied = 7,
    /// A resource (quota, memory, concurrent calls) is used up.
    ResourceExhausted = 8,
    /// The system is not in a state the operation needs.
    FailedPrecondition = 9,
    /// The operation was aborted (for example a concurrency conflict).
    Aborted = 10,
    /// The operation went past the valid range.
    OutOfRange = 11,
    /// The operation is not implemented or supported.
    Unimplemented = 12,
    /// An invariant the system expects is broken.
    Internal = 13,
    /// The service is unavailable for now; retrying may succeed.
    Unavailable = 14,
    /// Unrecoverable data loss or corruption.
    DataLoss = 15,
    /// The caller has no valid credentials.
    Unauthenticated = 16,
}

impl Code {
    /// Every code, in numeric order.
    pub const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code with this number, if there is one.
    pub fn from_u64(n: u64) -> Option<Code> {
        usize::try_from(n)
            .ok()
            .and_then(|i| Code::ALL.get(i).copied())
    }

    /// The code's number on the wire.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The code's name as gRPC spells it (`DEADLINE_EXCEEDED`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// The code with this gRPC name, if there is one.
    pub fn from_name(name: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a connection is going away (the GOAWAY frame's reason).
///
/// An open set: a receiver keeps numbers it does not know rather than
/// rejecting them, so that new reasons need no new protocol version.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reason(pub u32);

impl Reason {
    /// Graceful close: no error.
    pub const NO_ERROR: Reason = Reason(0);
    /// The peer broke the protocol (malformed frame, illegal state).
    pub const PROTOCOL_ERROR: Reason = Reason(1);
    /// The sender hit an internal failure.
    pub const INTERNAL_ERROR: Reason = Reason(2);
    /// A frame exceeded the receiver's advertised maximum size.
    pub const FRAME_TOO_LARGE: Reason = Reason(3);
    /// The peer exceeded a limit (metadata, bound methods, connections).
    pub const LIMIT_EXCEEDED: Reason = Reason(4);
    /// A handshake, idle or keepalive timeout expired.
    pub const TIMEOUT: Reason = Reason(5);

    /// The reason's name, or `None` for a number this version does not know.
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Reason::NO_ERROR => "NO_ERROR",
            Reason::PROTOCOL_ERROR => "PROTOCOL_ERROR",
            Reason::INTERNAL_ERROR => "INTERNAL_ERROR",
            Reason::FRAME_TOO_LARGE => "FRAME_TOO_LARGE",
            Reason::LIMIT_EXCEEDED => "LIMIT_EXCEEDED",
            Reason::TIMEOUT => "TIMEOUT",
            _ => return None,
        })
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "Reason({})", self.0),
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_both_ways() {
        for (i, code) in Code::ALL.into_iter().enumerate() {
            assert_eq!(code.as_u8() as usize, i);
            assert_eq!(Code::from_u64(i as u64), Some(code));
            assert_eq!(Code::from_name(code.as_str()), Some(code));
        }
        assert_eq!(Code::from_u64(17), None);
        assert_eq!(Code::from_u64(u64::MAX), None);
    }

    #[test]
    fn unknown_reasons_are_kept() {
        assert_eq!(format!("{:?}", Reason(77)), "Reason(77)");
        assert_eq!(Reason::TIMEOUT.to_string(), "TIMEOUT");
    }
}
