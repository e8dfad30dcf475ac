//! The closed-loop load: `C` callers, each calling again as soon as its
//! call returns, with the same bookkeeping for every system (so that it
//! costs every system the same).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;

use super::Counts;
use crate::runner::clock::Stamp;
use crate::runner::latency::{Hist, Recorder, new_hist};

/// A closed-loop load: `c` callers, each calling again as soon as its call
/// returns. Latency is recorded while `recording` is set.
#[derive(Clone)]
pub(crate) struct Load {
    pub(crate) c: usize,
    /// Callers polled together in one task (`join_all`), as a service
    /// that keeps several calls in flight from one task does; 1: a task
    /// per caller.
    pub(crate) per_task: usize,
    pub(crate) payload: Bytes,
    pub(crate) done: Arc<Counts>,
    /// Calls answered on another thread than the caller's call before (a
    /// runtime's task moved between its workers).
    pub(crate) moved: Arc<Counts>,
    pub(crate) recording: Arc<AtomicBool>,
    pub(crate) stop: Arc<AtomicBool>,
}

/// One caller's bookkeeping, the same for every system: its own latency
/// buffer and completion counter, so callers share nothing but the client
/// under test.
pub(crate) struct Caller {
    index: usize,
    load: Load,
    rec: Recorder,
    /// The id of the call in flight (unique across callers).
    id: u64,
    began: Stamp,
    /// The thread the caller's last call was answered on.
    thread: usize,
}

impl Caller {
    /// The next request while the load runs. Its clock started when the
    /// previous call was answered (every caller sends its next request
    /// straight after [`Caller::done`]), so a call costs one clock read.
    pub(crate) fn next(&mut self) -> Option<(u64, Bytes)> {
        if self.load.stop.load(Ordering::Relaxed) {
            return None;
        }
        self.id += 1;
        Some((self.id, self.load.payload.clone()))
    }

    /// The call in flight was answered with id `got`.
    pub(crate) fn done(&mut self, got: u64) -> anyhow::Result<()> {
        anyhow::ensure!(got == self.id, "response {got} for request {}", self.id);
        let now = Stamp::now();
        if self.load.recording.load(Ordering::Relaxed) {
            self.rec.record(now.nanos_since(self.began));
        }
        self.began = now;
        let thread = thread_number();
        if thread != self.thread {
            // A caller built on one thread and first answered on another
            // counts a move too; the measuring window leaves the warm-up's
            // out.
            self.thread = thread;
            self.load.moved.add(self.index, 1);
        }
        self.load.done.add(self.index, 1);
        Ok(())
    }
}

impl Load {
    /// The bookkeeping of caller `index` (of `c`), recording into `hist`:
    /// for a load whose callers are spawned elsewhere than by
    /// [`Load::callers`].
    pub(crate) fn caller(&self, index: usize, hist: Arc<parking_lot::Mutex<Hist>>) -> Caller {
        Caller {
            index,
            load: self.clone(),
            rec: Recorder::new(hist),
            id: (index as u64) << 40,
            began: Stamp::now(),
            thread: thread_number(),
        }
    }

    /// Runs `c` callers until stopped and merges their histograms, in tasks
    /// of `per_task` callers each. `caller` builds each one's loop: it
    /// takes its own client handle once, then calls through [`Caller`].
    pub(crate) async fn callers<F, Fut>(&self, caller: F) -> anyhow::Result<Hist>
    where
        F: Fn(Caller) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let hist = Arc::new(parking_lot::Mutex::new(new_hist()));
        let per_task = self.per_task.max(1);
        let mut tasks = Vec::new();
        for first in (0..self.c).step_by(per_task) {
            let group: Vec<Fut> = (first..(first + per_task).min(self.c))
                .map(|i| caller(self.caller(i, hist.clone())))
                .collect();
            tasks.push(tokio::spawn(async move {
                futures::future::join_all(group)
                    .await
                    .into_iter()
                    .collect::<anyhow::Result<Vec<()>>>()
            }));
        }
        for t in tasks {
            t.await??;
        }
        let all = std::mem::replace(&mut *hist.lock(), new_hist());
        Ok(all)
    }
}

/// A number for the current thread, unique in the process.
pub(crate) fn thread_number() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    thread_local! {
        static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NUMBER.with(|n| *n)
}

/// A payload of `len` bytes whose clones share no reference count: a
/// `Bytes` over a leaked buffer (one per size, for the life of the process),
/// so that handing every call its own copy costs no write to a line that
/// every caller shares.
pub(crate) fn static_payload(len: usize) -> bytes::Bytes {
    static CACHE: std::sync::Mutex<Vec<(usize, &'static [u8])>> = std::sync::Mutex::new(Vec::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let buf = match cache.iter().find(|(n, _)| *n == len) {
        Some((_, b)) => *b,
        None => {
            let b: &'static [u8] = Box::leak(vec![0xab; len].into_boxed_slice());
            cache.push((len, b));
            b
        }
    };
    bytes::Bytes::from_static(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call answered on another thread than the caller's call before
    /// counts as a move; one answered on the same thread does not.
    #[test]
    fn a_caller_answered_on_another_thread_counts_a_move() {
        let load = Load {
            c: 1,
            per_task: 1,
            payload: Bytes::new(),
            done: Arc::new(Counts::new(1)),
            moved: Arc::new(Counts::new(1)),
            recording: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
        };
        let mut me = load.caller(0, Arc::new(parking_lot::Mutex::new(new_hist())));
        let (id, _) = me.next().unwrap();
        me.done(id).unwrap();
        assert_eq!(load.moved.total(), 0, "same thread");
        let mut me = std::thread::spawn(move || {
            let (id, _) = me.next().unwrap();
            me.done(id).unwrap();
            me
        })
        .join()
        .unwrap();
        assert_eq!(load.moved.total(), 1, "another thread");
        let (id, _) = me.next().unwrap();
        me.done(id).unwrap();
        assert_eq!((load.moved.total(), load.done.total()), (2, 3), "and back");
    }

    /// Every caller runs once, `per_task` to a task.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn callers_run_once_each_in_tasks_of_per_task() {
        for (c, per_task, tasks) in [(10, 1, 10), (10, 4, 3), (256, 32, 8), (3, 8, 1)] {
            let load = Load {
                c,
                per_task,
                payload: Bytes::new(),
                done: Arc::new(Counts::new(c)),
                moved: Arc::new(Counts::new(c)),
                recording: Arc::new(AtomicBool::new(false)),
                stop: Arc::new(AtomicBool::new(true)),
            };
            let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
            load.callers(|me| {
                let seen = seen.clone();
                async move {
                    seen.lock().push((me.index, tokio::task::id()));
                    Ok(())
                }
            })
            .await
            .unwrap();
            let mut seen = seen.lock().clone();
            seen.sort_by_key(|(i, _)| *i);
            let indices: Vec<usize> = seen.iter().map(|(i, _)| *i).collect();
            assert_eq!(indices, (0..c).collect::<Vec<_>>());
            let mut ids: Vec<_> = seen.iter().map(|(_, t)| *t).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), tasks, "c={c} per_task={per_task}");
            assert!(
                seen.chunks(per_task)
                    .all(|g| g.iter().all(|(_, t)| *t == g[0].1))
            );
        }
    }
}
