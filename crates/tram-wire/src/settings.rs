//! The SETTINGS frame: limits each side announces once, right after the
//! preface.
//!
//! Each setting is a limit the *sender* enforces on what it *receives*. A
//! receiver keeps the defaults until the peer's SETTINGS arrives; the body is
//! a list of `varint id, varint value` pairs, with unknown ids ignored so that
//! new settings need no new protocol version.

use bytes::BufMut;

use crate::{Error, FrameType, varint};

/// The smallest `max_frame_size` a peer may announce; every receiver accepts
/// frames at least this large, so a client can send before it has seen the
/// server's settings.
pub const MIN_MAX_FRAME_SIZE: u32 = 16 * 1024;
/// The largest `max_frame_size` a peer may announce (1 GiB).
pub const MAX_MAX_FRAME_SIZE: u32 = 1 << 30;
/// The largest credit window a call direction may have (2^31 - 1 messages).
pub const MAX_CREDIT: u32 = i32::MAX as u32;

/// Identifiers of the known settings.
pub mod id {
    /// Largest frame body the sender accepts, in bytes.
    pub const MAX_FRAME_SIZE: u64 = 1;
    /// Most calls the sender serves at once on this connection.
    pub const MAX_CONCURRENT_CALLS: u64 = 2;
    /// Messages a peer may send on each new call direction before credit.
    pub const INITIAL_CREDIT: u64 = 3;
    /// Largest metadata block the sender accepts, in bytes.
    pub const MAX_METADATA_SIZE: u64 = 4;
    /// Most BIND frames (method names) the sender keeps per connection.
    pub const MAX_BOUND_METHODS: u64 = 5;
}

/// The limits one side of a connection announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Largest frame body accepted, in bytes
    /// ([`MIN_MAX_FRAME_SIZE`]..=[`MAX_MAX_FRAME_SIZE`]).
    pub max_frame_size: u32,
    /// Most calls served at once on this connection.
    pub max_concurrent_calls: u32,
    /// Messages the peer may send on a new call direction before it is
    /// granted credit (1..=[`MAX_CREDIT`]).
    pub initial_credit: u32,
    /// Largest metadata block accepted, in bytes.
    pub max_metadata_size: u32,
    /// Most method names the peer may bind on this connection.
    pub max_bound_methods: u32,
}

impl Settings {
    /// The values in force before the peer's SETTINGS arrives, and for any
    /// setting the peer leaves out.
    pub const DEFAULT: Settings = Settings {
        max_frame_size: 4 * 1024 * 1024,
        max_concurrent_calls: 1024,
        initial_credit: 64,
        max_metadata_size: 16 * 1024,
        max_bound_methods: 1024,
    };

    fn pairs(&self) -> [(u64, u32, u32); 5] {
        let d = Settings::DEFAULT;
        [
            (id::MAX_FRAME_SIZE, self.max_frame_size, d.max_frame_size),
            (
                id::MAX_CONCURRENT_CALLS,
                self.max_concurrent_calls,
                d.max_concurrent_calls,
            ),
            (id::INITIAL_CREDIT, self.initial_credit, d.initial_credit),
            (
                id::MAX_METADATA_SIZE,
                self.max_metadata_size,
                d.max_metadata_size,
            ),
            (
                id::MAX_BOUND_METHODS,
                self.max_bound_methods,
                d.max_bound_methods,
            ),
        ]
    }

    /// Length of the encoded body: only values that differ from the default
    /// are sent, in id order, which makes the encoding canonical.
    pub(crate) fn body_len(&self) -> usize {
        self.pairs()
            .iter()
            .filter(|(_, v, d)| v != d)
            .map(|&(id, v, _)| varint::encoded_len(id) + varint::encoded_len(u64::from(v)))
            .sum()
    }

    pub(crate) fn encode_body<B: BufMut + ?Sized>(&self, dst: &mut B) {
        for (id, value, default) in self.pairs() {
            if value != default {
                varint::put(dst, id);
                varint::put(dst, u64::from(value));
            }
        }
    }

    pub(crate) fn decode_body(mut body: &[u8]) -> Result<Settings, Error> {
        let mut settings = Settings::DEFAULT;
        let mut seen = 0u32;
        while !body.is_empty() {
            let id = read(&mut body)?;
            let value = read(&mut body)?;
            if (1..32).contains(&id) {
                let bit = 1u32 << id;
                if seen & bit != 0 {
                    return Err(Error::InvalidSetting {
                        id,
                        why: "repeated",
                    });
                }
                seen |= bit;
            }
            let value32 = || {
                u32::try_from(value).map_err(|_| Error::InvalidSetting {
                    id,
                    why: "above 2^32-1",
                })
            };
            match id {
                id::MAX_FRAME_SIZE => {
                    let v = value32()?;
                    if !(MIN_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&v) {
                        return Err(Error::InvalidSetting {
                            id,
                            why: "outside 16 KiB..=1 GiB",
                        });
                    }
                    settings.max_frame_size = v;
                }
                id::MAX_CONCURRENT_CALLS => settings.max_concurrent_calls = value32()?,
                id::INITIAL_CREDIT => {
                    let v = value32()?;
                    if v == 0 || v > MAX_CREDIT {
                        // At least one: a unary response always has credit.
                        return Err(Error::InvalidSetting {
                            id,
                            why: "outside 1..=2^31-1",
                        });
                    }
                    settings.initial_credit = v;
                }
                id::MAX_METADATA_SIZE => settings.max_metadata_size = value32()?,
                id::MAX_BOUND_METHODS => settings.max_bound_methods = value32()?,
                // Unknown settings are ignored (forward compatibility).
                _ => {}
            }
        }
        Ok(settings)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::DEFAULT
    }
}

fn read(body: &mut &[u8]) -> Result<u64, Error> {
    match varint::read(body) {
        Ok((v, n)) => {
            *body = &body[n..];
            Ok(v)
        }
        Err(varint::VarintError::Overflow) => Err(Error::VarintOverflow),
        Err(varint::VarintError::Incomplete) => Err(Error::Truncated {
            frame: FrameType::Settings,
        }),
    }
}
