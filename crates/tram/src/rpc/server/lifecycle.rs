//! How a connection closes gracefully, in two steps (as HTTP/2 servers
//! do): a first GOAWAY with no count, so the client sends no new calls,
//! and a PING; once the client answers it, every call it sent before it
//! saw the GOAWAY has arrived, and the final GOAWAY gives the count. No
//! call is ever refused unprocessed for having crossed the GOAWAY on the
//! wire. And a connection's maximum age (gRFC A9): closed gracefully
//! after its age (give or take a tenth, so that connections made together
//! do not all close together), forced after a grace period.

use std::time::Duration;

use tokio::time::Instant;

/// The payload of the PING that follows the first GOAWAY.
pub(super) const DRAIN_PING: [u8; 8] = *b"tramdrn1";

/// How long the client has to answer that PING before the final GOAWAY
/// goes anyway.
const PING_WAIT: Duration = Duration::from_secs(1);

/// Where a connection stands in its life.
#[derive(Debug)]
pub(super) struct Life {
    phase: Phase,
    /// When the connection reaches its maximum age, if it has one.
    age_at: Option<Instant>,
    /// How long its calls get after the final GOAWAY of an age close.
    grace: Option<Duration>,
}

#[derive(Debug)]
enum Phase {
    Open,
    /// The first GOAWAY and the PING went out; the final GOAWAY goes by
    /// `by` at the latest.
    Announced {
        why: &'static str,
        by: Instant,
        aged: bool,
    },
    /// The final GOAWAY went out; calls in flight finish (by `force_at`).
    Closing {
        force_at: Option<Instant>,
    },
}

/// What the connection should do now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Due {
    Nothing,
    /// Begin a graceful close (its maximum age).
    Begin(&'static str),
    /// Send the final GOAWAY.
    Final(&'static str),
    /// Close now: the grace period is over.
    Force,
}

impl Life {
    /// A connection opened at `now`, with `max_age` and its grace if set;
    /// `jitter` is a number of any value, to spread the ages.
    pub(super) fn new(now: Instant, max_age: Option<(Duration, Duration)>, jitter: u64) -> Life {
        let age_at = max_age.map(|(age, _)| {
            let spread = (jitter % 2001) as f64 / 10_000.0 - 0.1;
            now + age.mul_f64(1.0 + spread)
        });
        Life {
            phase: Phase::Open,
            age_at,
            grace: max_age.map(|(_, grace)| grace),
        }
    }

    /// The next time something is due, if any.
    pub(super) fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Open => self.age_at,
            Phase::Announced { by, .. } => Some(by),
            Phase::Closing { force_at } => force_at,
        }
    }

    /// Whether a graceful close has begun.
    pub(super) fn closing(&self) -> bool {
        !matches!(self.phase, Phase::Open)
    }

    /// A graceful close begins at `now` (its first GOAWAY and the PING are
    /// being sent). False if one began already.
    pub(super) fn begin(&mut self, why: &'static str, now: Instant) -> bool {
        self.begin_inner(why, now, false)
    }

    fn begin_inner(&mut self, why: &'static str, now: Instant, aged: bool) -> bool {
        if self.closing() {
            return false;
        }
        self.phase = Phase::Announced {
            why,
            by: now + PING_WAIT,
            aged,
        };
        true
    }

    /// The client answered the drain PING: the final GOAWAY's reason, if
    /// it is due.
    pub(super) fn pong(&mut self, now: Instant) -> Option<&'static str> {
        match self.phase {
            Phase::Announced { why, aged, .. } => {
                self.closed(now, aged);
                Some(why)
            }
            _ => None,
        }
    }

    fn closed(&mut self, now: Instant, aged: bool) {
        let force_at = if aged {
            self.grace.map(|g| now + g)
        } else {
            None
        };
        self.phase = Phase::Closing { force_at };
    }

    /// What is due at `now`.
    pub(super) fn due(&mut self, now: Instant) -> Due {
        match self.phase {
            Phase::Open => match self.age_at {
                Some(at) if now >= at => {
                    self.begin_inner("max connection age", now, true);
                    Due::Begin("max connection age")
                }
                _ => Due::Nothing,
            },
            Phase::Announced { why, by, aged } if now >= by => {
                self.closed(now, aged);
                Due::Final(why)
            }
            Phase::Closing { force_at: Some(at) } if now >= at => Due::Force,
            _ => Due::Nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn max_age_begins_closes_and_forces_after_grace() {
        let t0 = Instant::now();
        let mut life = Life::new(t0, Some((100 * S, 10 * S)), 1000);
        // 1000 of 2000: no spread.
        assert_eq!(life.deadline(), Some(t0 + 100 * S));
        assert_eq!(life.due(t0 + 50 * S), Due::Nothing);
        assert_eq!(life.due(t0 + 100 * S), Due::Begin("max connection age"));
        assert!(!life.begin("shutdown", t0 + 100 * S), "one close at a time");
        assert_eq!(life.pong(t0 + 100 * S), Some("max connection age"));
        assert_eq!(life.deadline(), Some(t0 + 110 * S));
        assert_eq!(life.due(t0 + 110 * S), Due::Force);
    }

    #[test]
    fn an_unanswered_ping_does_not_hold_the_close_up() {
        let t0 = Instant::now();
        let mut life = Life::new(t0, None, 0);
        assert_eq!(life.deadline(), None);
        assert!(life.begin("idle", t0));
        assert_eq!(life.due(t0 + PING_WAIT), Due::Final("idle"));
        // Not an age close: calls take as long as they take.
        assert_eq!(life.deadline(), None);
    }

    #[test]
    fn ages_are_spread_by_a_tenth() {
        let t0 = Instant::now();
        for jitter in [0, 2000, 777] {
            let at = Life::new(t0, Some((100 * S, S)), jitter)
                .deadline()
                .unwrap();
            let d = at - t0;
            assert!(d >= 90 * S && d <= 110 * S, "{d:?}");
        }
    }
}
