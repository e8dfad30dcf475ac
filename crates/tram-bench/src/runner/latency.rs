//! Latency as the loads record it: an HDR histogram in nanoseconds, filled
//! through a per-caller buffer.

/// A latency histogram in nanoseconds, 1 ns to 60 s, 3 significant digits.
pub(crate) type Hist = hdrhistogram::Histogram<u64>;

pub(crate) fn new_hist() -> Hist {
    Hist::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

/// Records latencies into a shared histogram a run at a time: one lock per
/// 256 samples, and one histogram in the cache rather than one per caller.
/// Every system's client records through it, so its cost is the same for
/// all.
pub(crate) struct Recorder {
    shared: std::sync::Arc<parking_lot::Mutex<Hist>>,
    buf: Vec<u64>,
}

impl Recorder {
    pub(crate) fn new(shared: std::sync::Arc<parking_lot::Mutex<Hist>>) -> Recorder {
        Recorder {
            shared,
            buf: Vec::with_capacity(256),
        }
    }

    pub(crate) fn record(&mut self, nanos: u64) {
        self.buf.push(nanos.max(1));
        if self.buf.len() == self.buf.capacity() {
            self.flush();
        }
    }

    pub(crate) fn flush(&mut self) {
        let mut h = self.shared.lock();
        for v in self.buf.drain(..) {
            // Out of range only past 60 s: saturate rather than lose it.
            h.saturating_record(v);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}
