//! Outlier detection (gRFC A50's failure-percentage ejection): at every
//! interval, an endpoint whose calls failed at or above a threshold, over
//! enough calls to judge, is ejected for the base time times the number
//! of times it has been ejected (at most five minutes), and readmitted
//! when that time is over. Never more than a share of the endpoints is
//! ejected at once, so that a fleet-wide failure does not eject the
//! fleet.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::OutlierDetection;
use super::endpoint::Endpoint;

/// The longest an endpoint stays ejected.
const MAX_EJECTION: Duration = Duration::from_secs(300);

/// One interval's judgement over `endpoints`, as of `now`.
pub(crate) fn evaluate(endpoints: &[Arc<Endpoint>], cfg: &OutlierDetection, now: Instant) {
    let max_ejected = endpoints.len() * cfg.max_ejection_percent as usize / 100;
    let mut ejected = 0;
    for e in endpoints {
        if e.is_ejected(now) {
            ejected += 1;
        } else {
            e.readmit();
        }
    }
    for e in endpoints {
        let ended = e.stats.ended.swap(0, Ordering::Relaxed);
        let failed = e.stats.failed.swap(0, Ordering::Relaxed);
        if e.is_ejected(now) || ended < cfg.minimum_calls || ejected >= max_ejected {
            continue;
        }
        if u64::from(failed) * 100 >= u64::from(ended) * u64::from(cfg.failure_percentage) {
            let times = e.times_ejected.fetch_add(1, Ordering::Relaxed) + 1;
            let time = cfg
                .base_ejection_time
                .saturating_mul(times)
                .min(MAX_EJECTION);
            tracing::info!(
                endpoint = %e.target,
                failed,
                ended,
                ejected_for = ?time,
                "ejecting an endpoint whose calls fail"
            );
            e.eject(now + time);
            ejected += 1;
        }
    }
}
