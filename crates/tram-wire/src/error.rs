//! Decoding errors.
//!
//! Every malformed input maps onto one variant, and every variant maps onto a
//! GOAWAY [`Reason`] the receiver sends before closing the connection, the
//! way rustls maps each error onto a TLS alert.

use crate::{FrameType, Reason};

/// Why bytes from the peer are not a valid tram frame or preface.
///
/// All of these are connection errors: the receiver sends GOAWAY with
/// [`Error::reason`] and closes. None of them is recoverable by reading more.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection did not start with the tram preface.
    #[error("not a tram connection: bad preface")]
    BadPreface,
    /// The preface names a protocol version this implementation lacks.
    #[error("unsupported tram protocol version {0}")]
    UnsupportedVersion(u8),
    /// A frame's announced body length exceeds the receiver's maximum.
    #[error("frame body of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// The announced length.
        len: u64,
        /// The receiver's limit.
        max: u32,
    },
    /// A varint longer than 10 bytes or larger than `u64::MAX`.
    #[error("varint longer than 10 bytes or above u64::MAX")]
    VarintOverflow,
    /// The type nibble names no frame type.
    #[error("unknown frame type {0:#x}")]
    UnknownFrameType(u8),
    /// Flags set that the frame type does not define.
    #[error("{frame:?} frame with undefined flags {flags:#x}")]
    UnknownFlags {
        /// The frame's type.
        frame: FrameType,
        /// The flags nibble as received.
        flags: u8,
    },
    /// A field runs past the end of the frame body.
    #[error("{frame:?} frame truncated")]
    Truncated {
        /// The frame's type.
        frame: FrameType,
    },
    /// Bytes left over after the last field of a frame with no free-form tail.
    #[error("{frame:?} frame has trailing bytes")]
    TrailingBytes {
        /// The frame's type.
        frame: FrameType,
    },
    /// A field's value is outside its allowed range.
    #[error("{frame:?} frame: {field} out of range")]
    OutOfRange {
        /// The frame's type.
        frame: FrameType,
        /// Which field.
        field: &'static str,
    },
    /// A status code other than gRPC's 0..=16.
    #[error("invalid status code {0}")]
    InvalidCode(u64),
    /// A text field that is not UTF-8.
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 {
        /// Which field.
        field: &'static str,
    },
    /// A metadata block that breaks the key or value rules.
    #[error("invalid metadata: {0}")]
    InvalidMetadata(&'static str),
    /// A SETTINGS frame with a repeated or out-of-range setting.
    #[error("invalid setting {id}: {why}")]
    InvalidSetting {
        /// The setting's identifier.
        id: u64,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl Error {
    /// A stable snake_case name for the kind of error, as used in
    /// `testdata/vectors/` and in logs (`frame_too_large`, `truncated`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::BadPreface => "bad_preface",
            Error::UnsupportedVersion(_) => "unsupported_version",
            Error::FrameTooLarge { .. } => "frame_too_large",
            Error::VarintOverflow => "varint_overflow",
            Error::UnknownFrameType(_) => "unknown_frame_type",
            Error::UnknownFlags { .. } => "unknown_flags",
            Error::Truncated { .. } => "truncated",
            Error::TrailingBytes { .. } => "trailing_bytes",
            Error::OutOfRange { .. } => "out_of_range",
            Error::InvalidCode(_) => "invalid_code",
            Error::InvalidUtf8 { .. } => "invalid_utf8",
            Error::InvalidMetadata(_) => "invalid_metadata",
            Error::InvalidSetting { .. } => "invalid_setting",
        }
    }

    /// The GOAWAY reason a receiver sends for this error.
    pub fn reason(&self) -> Reason {
        match self {
            Error::FrameTooLarge { .. } => Reason::FRAME_TOO_LARGE,
            _ => Reason::PROTOCOL_ERROR,
        }
    }
}
