//! A connection's timers (handshake, idle, keepalive) as timestamps,
//! checked when the connection's one timer fires: receiving frames costs a
//! clock read per read, never a timer reset. Both sides use it; nothing
//! here reads the clock, so it is tested with made-up instants.

use std::time::Duration;

use tokio::time::Instant;

/// Keepalive pings: after `interval` without a frame from the peer, send
/// a PING; if nothing at all arrives within `timeout` after it, the peer is
/// gone (a half-open connection, a stalled network) and the connection is
/// closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keepalive {
    /// Quiet time before a ping (default 30 s).
    pub interval: Duration,
    /// How long the answer may take (default 10 s).
    pub timeout: Duration,
}

impl Default for Keepalive {
    fn default() -> Self {
        Keepalive {
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
        }
    }
}

/// The timers of one connection.
#[derive(Debug)]
pub(crate) struct Timers {
    opened: Instant,
    /// How long the peer has to finish its handshake (server side).
    handshake: Option<Duration>,
    idle: Option<Duration>,
    keepalive: Option<Keepalive>,
    /// When a frame last arrived.
    last_rx: Instant,
    /// When the connection last had no call open and no frame arrived
    /// (the start of idleness), if it is idle.
    idle_since: Option<Instant>,
    /// When our unanswered keepalive ping went out.
    ping_sent: Option<Instant>,
    pings: u64,
}

/// What a timer check found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TimerEvent {
    /// Nothing yet; check again then.
    Next(Instant),
    /// Send a keepalive ping with this payload; check again then.
    Ping([u8; 8], Instant),
    /// Idle for too long: go away gracefully.
    Idle,
    /// The peer missed a deadline: close the connection.
    Expired(&'static str),
}

/// How far ahead a check looks when no timer is armed.
const FAR: Duration = Duration::from_secs(3600);

impl Timers {
    pub(crate) fn new(
        now: Instant,
        handshake: Option<Duration>,
        idle: Option<Duration>,
        keepalive: Option<Keepalive>,
    ) -> Timers {
        Timers {
            opened: now,
            handshake,
            idle,
            keepalive,
            last_rx: now,
            idle_since: Some(now),
            ping_sent: None,
            pings: 0,
        }
    }

    /// Frames arrived at `now`.
    pub(crate) fn received(&mut self, now: Instant) {
        self.last_rx = now;
        self.ping_sent = None;
    }

    /// Whether the connection is idle as far as these timers know.
    pub(crate) fn is_idle(&self) -> bool {
        self.idle_since.is_some()
    }

    /// Whether calls are open: idleness starts when the last one closes.
    pub(crate) fn busy(&mut self, busy: bool, now: Instant) {
        match (busy, self.idle_since) {
            (true, Some(_)) => self.idle_since = None,
            (false, None) => self.idle_since = Some(now),
            _ => {}
        }
    }

    /// Checks every timer at `now`; `settled` is whether the handshake is
    /// done.
    pub(crate) fn check(&mut self, now: Instant, settled: bool) -> TimerEvent {
        let mut next = now + FAR;
        if let (false, Some(handshake)) = (settled, self.handshake) {
            let at = self.opened + handshake;
            if now >= at {
                return TimerEvent::Expired("handshake timeout");
            }
            next = next.min(at);
        }
        if let (Some(idle), Some(since)) = (self.idle, self.idle_since) {
            let at = since.max(self.last_rx) + idle;
            if now >= at {
                return TimerEvent::Idle;
            }
            next = next.min(at);
        }
        if let Some(k) = self.keepalive {
            match self.ping_sent {
                Some(sent) => {
                    let at = sent + k.timeout;
                    if now >= at {
                        return TimerEvent::Expired("keepalive ping unanswered");
                    }
                    next = next.min(at);
                }
                None => {
                    let at = self.last_rx + k.interval;
                    if now >= at {
                        self.ping_sent = Some(now);
                        self.pings += 1;
                        return TimerEvent::Ping(
                            self.pings.to_be_bytes(),
                            next.min(now + k.timeout),
                        );
                    }
                    next = next.min(at);
                }
            }
        }
        TimerEvent::Next(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn keepalive() -> Option<Keepalive> {
        Some(Keepalive {
            interval: 30 * S,
            timeout: 10 * S,
        })
    }

    #[test]
    fn handshake_expires_only_until_settled() {
        let t0 = Instant::now();
        let mut t = Timers::new(t0, Some(10 * S), None, None);
        assert_eq!(t.check(t0, false), TimerEvent::Next(t0 + 10 * S));
        assert_eq!(
            t.check(t0 + 10 * S, false),
            TimerEvent::Expired("handshake timeout")
        );
        assert!(matches!(t.check(t0 + 10 * S, true), TimerEvent::Next(_)));
    }

    #[test]
    fn keepalive_pings_after_silence_and_expires_unanswered() {
        let t0 = Instant::now();
        let mut t = Timers::new(t0, None, None, keepalive());
        assert_eq!(t.check(t0, true), TimerEvent::Next(t0 + 30 * S));
        // Traffic pushes the ping back.
        t.received(t0 + 20 * S);
        assert_eq!(t.check(t0 + 30 * S, true), TimerEvent::Next(t0 + 50 * S));
        let TimerEvent::Ping(payload, next) = t.check(t0 + 50 * S, true) else {
            panic!("a ping is due")
        };
        assert_eq!(u64::from_be_bytes(payload), 1);
        assert_eq!(next, t0 + 60 * S);
        // Answered: back to waiting for silence.
        t.received(t0 + 51 * S);
        assert_eq!(t.check(t0 + 52 * S, true), TimerEvent::Next(t0 + 81 * S));
        // Not answered: the connection is dead.
        assert!(matches!(t.check(t0 + 81 * S, true), TimerEvent::Ping(..)));
        assert_eq!(
            t.check(t0 + 91 * S, true),
            TimerEvent::Expired("keepalive ping unanswered")
        );
    }

    #[test]
    fn idleness_counts_from_the_last_call_or_frame() {
        let t0 = Instant::now();
        let mut t = Timers::new(t0, None, Some(60 * S), None);
        t.busy(true, t0 + S);
        assert!(!t.is_idle());
        assert_eq!(t.check(t0 + 100 * S, true), TimerEvent::Next(t0 + 3700 * S));
        t.busy(false, t0 + 100 * S);
        t.received(t0 + 120 * S);
        assert_eq!(t.check(t0 + 150 * S, true), TimerEvent::Next(t0 + 180 * S));
        assert_eq!(t.check(t0 + 180 * S, true), TimerEvent::Idle);
    }
}
