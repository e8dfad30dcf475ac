//! Thread per core ([`ServerBuilder::threads`](super::ServerBuilder::threads)):
//! `n` threads, each running a single-threaded tokio runtime, and each
//! accepted connection handed to the one with the fewest connections. A
//! connection's task, its handlers and its writer then share one thread
//! for good: no work stealing moves them, and nothing they do wakes
//! another thread.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::Handle;
use tokio::sync::watch;

/// The threads of a server in thread-per-core mode; they stop when this
/// is dropped (connections still open on them are dropped with them).
pub(super) struct Cores {
    cores: Vec<Core>,
    /// Dropping it wakes every thread to finish.
    _stop: watch::Sender<()>,
}

struct Core {
    handle: Handle,
    /// Connections running on it.
    live: Arc<AtomicUsize>,
}

impl Cores {
    /// Starts `n` threads (at least one), named `tram-core-<i>`.
    ///
    /// # Errors
    ///
    /// A thread or its runtime could not be made.
    pub(super) fn start(n: usize) -> io::Result<Cores> {
        let (stop, stopped) = watch::channel(());
        let mut cores = Vec::new();
        for i in 0..n.max(1) {
            let (tx, rx) = std::sync::mpsc::channel();
            let mut stopped = stopped.clone();
            std::thread::Builder::new()
                .name(format!("tram-core-{i}"))
                .spawn(move || {
                    let rt = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(rt) => rt,
                        Err(e) => {
                            let _ = tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = tx.send(Ok(rt.handle().clone()));
                    // Until the sender is dropped.
                    rt.block_on(async { while stopped.changed().await.is_ok() {} });
                })?;
            let handle = rx
                .recv()
                .map_err(|_| io::Error::other("a server thread exited at start"))??;
            cores.push(Core {
                handle,
                live: Arc::new(AtomicUsize::new(0)),
            });
        }
        Ok(Cores { cores, _stop: stop })
    }

    /// Runs `conn` (a connection's task) on the core with the fewest
    /// connections; the handle to wait for it or abort it.
    pub(super) fn spawn<F>(&self, conn: F) -> tokio::task::JoinHandle<()>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let core = self
            .cores
            .iter()
            .min_by_key(|c| c.live.load(Ordering::Relaxed))
            .unwrap_or_else(|| unreachable!("Cores::start makes at least one"));
        let live = core.live.clone();
        live.fetch_add(1, Ordering::Relaxed);
        core.handle.spawn(async move {
            let _counted = Counted(live);
            conn.await;
        })
    }
}

/// Uncounts a connection from its core when its task ends.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
