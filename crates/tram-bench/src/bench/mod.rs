//! The benchmarks: each runs its systems interleaved over rounds and
//! writes its results (`report`).
//!
//! - `compare`: closed-loop unary echo, `C` calls in flight.
//! - `fanin`: closed-loop unary echo from many client connections to one
//!   server.
//! - `closed`: the figures and tables both closed-loop benchmarks share.
//! - `rate`: open-loop unary echo at a sweep of fixed rates.
//! - `stream`: message streams and RPC streams.
//! - `fleet`: one client balancing over several servers as they are
//!   slowed, killed and restarted.
//! - `instructions`: a fixed amount of unary work in one thread, for
//!   instruction counts under callgrind.
//! - `targets`: reads the result files of runs against tram's
//!   performance targets.

mod closed;
pub(crate) mod compare;
pub(crate) mod fanin;
pub(crate) mod fleet;
pub(crate) mod instructions;
pub(crate) mod rate;
pub(crate) mod stream;
pub(crate) mod targets;
