//! Logging that a flood of bad peers cannot turn into a flood of logs: a
//! connection logs its protocol violation once (it closes after it), and
//! across the process at most a burst of such lines a second; the rest
//! are counted and the count is reported with the next line let through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lines let through per second, across the process.
const PER_SECOND: u64 = 10;

/// The current second and the lines logged in it, packed: the second in
/// the high 44 bits, the count in the low 20.
static WINDOW: AtomicU64 = AtomicU64::new(0);
/// Lines held back since the last one let through.
static SUPPRESSED: AtomicU64 = AtomicU64::new(0);

/// Whether a line may be logged now; if so, how many were held back before
/// it (to report with it).
pub(crate) fn allow() -> Option<u64> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    allow_at(now)
}

fn allow_at(second: u64) -> Option<u64> {
    let mut current = WINDOW.load(Ordering::Relaxed);
    loop {
        let (at, count) = (current >> 20, current & 0xf_ffff);
        let next = if at == second & 0xfff_ffff_ffff {
            if count >= PER_SECOND {
                SUPPRESSED.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            current + 1
        } else {
            ((second & 0xfff_ffff_ffff) << 20) | 1
        };
        match WINDOW.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Some(SUPPRESSED.swap(0, Ordering::Relaxed)),
            Err(seen) => current = seen,
        }
    }
}

/// Logs a peer's protocol violation at INFO, within the limit.
macro_rules! violation {
    ($($arg:tt)+) => {
        if let Some(suppressed) = $crate::observe::limit::allow() {
            tracing::info!(suppressed, $($arg)+);
        }
    };
}
pub(crate) use violation;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_a_burst_a_second_and_the_rest_counted() {
        // A second far from now, so other tests' lines do not share it.
        let second = 7_777;
        let allowed = (0..100).filter(|_| allow_at(second).is_some()).count();
        assert_eq!(allowed as u64, PER_SECOND);
        let reported = allow_at(second + 1).expect("a new second lets lines through");
        assert!(reported >= 90, "held-back lines are reported: {reported}");
    }
}
