//! Picking an endpoint for a call: power of two choices over Peak-EWMA
//! cost (the default), round robin, or the first that is ready.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Policy;
use super::endpoint::Endpoint;
use crate::rpc::client::ConnRef;

/// The connection a call should take under `policy` at `now` (the
/// balancer's clock), among `endpoints`
/// (only those admitted and with a usable connection qualify); `kick` is
/// called with each endpoint seen without a connection, to connect it.
pub(crate) fn pick(
    policy: Policy,
    endpoints: &[Arc<Endpoint>],
    now: u64,
    rr: &AtomicUsize,
    mut kick: impl FnMut(&Arc<Endpoint>),
) -> Option<ConnRef> {
    let n = endpoints.len();
    let mut cost = |e: &Arc<Endpoint>| {
        let c = e.cost(now);
        if c.is_none() && e.admitted(now) {
            kick(e);
        }
        c
    };
    let chosen = match policy {
        Policy::PeakEwma if n >= 2 => {
            let (a, b) = two_distinct(n);
            match (cost(&endpoints[a]), cost(&endpoints[b])) {
                (Some(ca), Some(cb)) => Some(if cb < ca { b } else { a }),
                (Some(_), None) => Some(a),
                (None, Some(_)) => Some(b),
                // Neither is ready: the first that is, from a random place.
                (None, None) => scan(endpoints, a, &mut cost),
            }
        }
        Policy::PeakEwma | Policy::PickFirst => scan(endpoints, 0, &mut cost),
        Policy::RoundRobin => {
            let start = rr.fetch_add(1, Ordering::Relaxed) % n.max(1);
            scan(endpoints, start, &mut cost)
        }
    };
    // Its connection is taken only now: the loser's is never cloned.
    endpoints[chosen?].ready_connection()
}

/// The first endpoint from `start` on (wrapping) that can take a call.
fn scan(
    endpoints: &[Arc<Endpoint>],
    start: usize,
    cost: &mut impl FnMut(&Arc<Endpoint>) -> Option<f64>,
) -> Option<usize> {
    let n = endpoints.len();
    (0..n)
        .map(|i| (start + i) % n)
        .find(|&i| cost(&endpoints[i]).is_some())
}

/// Two different indices below `n` (at least 2), at random.
fn two_distinct(n: usize) -> (usize, usize) {
    let r = random();
    // Each half of the number scaled to its range: a multiplication, not
    // a division.
    let below = |x: u64, m: usize| (((x & 0xffff_ffff) * m as u64) >> 32) as usize;
    let a = below(r, n);
    let b = below(r >> 32, n - 1);
    (a, if b >= a { b + 1 } else { b })
}

/// A per-thread xorshift: choices need spread, not secrecy.
fn random() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x5eed);
            h.finish() | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_distinct_covers_every_pair_and_never_repeats() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let (a, b) = two_distinct(4);
            assert!(a < 4 && b < 4 && a != b);
            seen.insert((a, b));
        }
        assert_eq!(seen.len(), 12);
    }
}
