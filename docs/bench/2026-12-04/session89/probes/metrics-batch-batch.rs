//! A server connection's calls counted per poll of its task rather than
//! per call.
//!
//! Every call moves two metrics at its start (`calls.started` up,
//! `calls.active` up) and one at its end (`calls.active` down). Each is an
//! atomic update in the recorder (two, with the recorder's generation
//! count), on counters that every connection of the process shares, and so
//! moved between the cores of every worker that runs a connection. A
//! connection's driver starts and ends a turn's calls in one poll of its
//! task; while it is polled, the calls' starts and ends on its thread are
//! counted here, and each method's net change goes to the recorder once
//! when the poll ends: a call that starts and ends in the same poll (an
//! answer at once) leaves `calls.active` untouched, and a poll's calls of
//! one method raise `calls.started` by their number in one update.
//!
//! What the recorder shows lags the calls by at most the poll that counted
//! them (microseconds: a poll never waits). Durations are recorded per
//! call, as they happen.

use std::cell::RefCell;

use super::metrics::MethodMetrics;

/// The counts of the poll under way on this thread, if one is.
struct Batch {
    /// A poll is counting.
    on: bool,
    /// Each method's change so far; a few at most (the methods a poll's
    /// calls were for).
    pending: Vec<Pending>,
}

struct Pending {
    method: &'static MethodMetrics,
    started: u64,
    active: i64,
}

thread_local! {
    static BATCH: RefCell<Batch> = const {
        RefCell::new(Batch {
            on: false,
            pending: Vec::new(),
        })
    };
}

/// Counts the starts and ends of calls on this thread until it is
/// dropped, then records them (see the module docs). Inside another, it
/// adds to the outer one.
pub(crate) struct Counting {
    outer: bool,
}

/// Starts counting on this thread.
pub(crate) fn counting() -> Counting {
    let outer = BATCH
        .try_with(|b| !std::mem::replace(&mut b.borrow_mut().on, true))
        .unwrap_or(false);
    Counting { outer }
}

impl Drop for Counting {
    fn drop(&mut self) {
        if !self.outer {
            return;
        }
        // Recorded outside the borrow, whatever the recorder does; the
        // list goes back for its room.
        let Ok(mut pending) = BATCH.try_with(|b| {
            let mut b = b.borrow_mut();
            b.on = false;
            std::mem::take(&mut b.pending)
        }) else {
            return;
        };
        for p in pending.drain(..) {
            p.method.record_counts(p.started, p.active);
        }
        let _ = BATCH.try_with(|b| {
            let mut b = b.borrow_mut();
            if b.pending.capacity() < pending.capacity() {
                b.pending = pending;
            }
        });
    }
}

/// Adds a call's start (`started` 1, `active` 1) or end (`active` -1) of
/// `method` to the poll under way; `false` when none is, for the caller to
/// record it itself.
pub(super) fn add(method: &'static MethodMetrics, started: u64, active: i64) -> bool {
    BATCH
        .try_with(|b| {
            let mut b = b.borrow_mut();
            if !b.on {
                return false;
            }
            match b
                .pending
                .iter_mut()
                .find(|p| std::ptr::eq(p.method, method))
            {
                Some(p) => {
                    p.started += started;
                    p.active += active;
                }
                None => b.pending.push(Pending {
                    method,
                    started,
                    active,
                }),
            }
            true
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use tram_wire::Code;

    use super::super::Side;
    use super::*;

    /// What the recorder held, summed over snapshots (each takes what it
    /// shows): counters and gauges by name and method, and how many values
    /// each histogram got.
    #[derive(Default)]
    struct Seen(HashMap<(String, String), f64>);

    impl Seen {
        fn refresh(&mut self, snapshotter: &Snapshotter) {
            for (key, _, _, value) in snapshotter.snapshot().into_vec() {
                let method = key
                    .key()
                    .labels()
                    .find(|l| l.key() == "rpc.method")
                    .map(|l| l.value().to_owned())
                    .unwrap_or_default();
                let n = match value {
                    DebugValue::Counter(n) => n as f64,
                    DebugValue::Gauge(g) => g.0,
                    DebugValue::Histogram(vs) => vs.len() as f64,
                };
                *self
                    .0
                    .entry((key.key().name().to_owned(), method))
                    .or_default() += n;
            }
        }

        fn get(&self, name: &str, method: &str) -> f64 {
            let key = (name.to_owned(), method.to_owned());
            self.0.get(&key).copied().unwrap_or(0.0)
        }

        /// `calls.started` and `calls.active` of `method`, as recorded now.
        fn calls(&mut self, snapshotter: &Snapshotter, method: &str) -> (f64, f64) {
            self.refresh(snapshotter);
            (
                self.get("rpc.server.calls.started", method),
                self.get("rpc.server.calls.active", method),
            )
        }
    }

    #[test]
    fn a_poll_records_each_methods_net_change_when_it_ends() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let new = |name| -> &'static MethodMetrics {
                Box::leak(Box::new(MethodMetrics::new(
                    Side::Server,
                    "tram",
                    name,
                    false,
                )))
            };
            let (a, b) = (new("/t.T/A"), new("/t.T/B"));
            let mut seen = Seen::default();
            {
                let _poll = counting();
                for _ in 0..5 {
                    a.start();
                }
                for _ in 0..3 {
                    a.end(Code::Ok, Duration::from_micros(5));
                }
                b.start();
                {
                    // A count inside another adds to it.
                    let _inner = counting();
                    b.end(Code::Ok, Duration::from_micros(7));
                }
                assert_eq!(seen.calls(&snapshotter, "/t.T/A"), (0.0, 0.0));
                assert_eq!(seen.calls(&snapshotter, "/t.T/B"), (0.0, 0.0));
                // Durations go to the recorder as they happen.
                assert_eq!(seen.get("rpc.server.call.duration", "/t.T/A"), 3.0);
                assert_eq!(seen.get("rpc.server.call.duration", "/t.T/B"), 1.0);
            }
            assert_eq!(seen.calls(&snapshotter, "/t.T/A"), (5.0, 2.0));
            assert_eq!(seen.calls(&snapshotter, "/t.T/B"), (1.0, 0.0));
            // Outside a poll, each start and end is recorded at once.
            a.end(Code::Ok, Duration::from_micros(5));
            assert_eq!(seen.calls(&snapshotter, "/t.T/A"), (5.0, 1.0));
            a.start();
            assert_eq!(seen.calls(&snapshotter, "/t.T/A"), (6.0, 2.0));
        });
    }
}
