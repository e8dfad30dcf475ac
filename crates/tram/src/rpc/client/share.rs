//! A connection's references, counted in shares.
//!
//! Every call holds a reference to its connection while it runs, so a
//! reference count that every caller changes is a cache line that moves
//! between the runtime's workers twice a call. Callers take one of several
//! shares instead, chosen by their thread, each counted on a line of its
//! own: a caller's line moves only when its task has moved to another
//! thread since it took its share.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::conn::ClientConn;

/// Shares per connection: a power of two, more than a runtime usually
/// has workers, so that two threads seldom share one.
const SHARES: usize = 8;

/// A caller's reference to a connection: one of its [`Shares`].
#[derive(Clone)]
pub(crate) struct ConnRef(Arc<Share>);

/// One share; its alignment keeps its count off the lines of the others.
#[repr(align(128))]
struct Share(Arc<ClientConn>);

/// Every share of one connection, as a connection slot keeps it.
pub(crate) struct Shares(Box<[ConnRef]>);

impl Shares {
    pub(crate) fn new(conn: Arc<ClientConn>) -> Shares {
        Shares(
            (0..SHARES)
                .map(|_| ConnRef(Arc::new(Share(conn.clone()))))
                .collect(),
        )
    }

    /// The share of the current thread.
    #[inline]
    pub(crate) fn get(&self) -> ConnRef {
        self.0[thread_share()].clone()
    }
}

impl Deref for Shares {
    type Target = ClientConn;

    fn deref(&self) -> &ClientConn {
        &self.0[0]
    }
}

impl Deref for ConnRef {
    type Target = ClientConn;

    #[inline]
    fn deref(&self) -> &ClientConn {
        &self.0.0
    }
}

/// The share this thread takes, numbered as threads first ask.
#[inline]
fn thread_share() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARES;
    }
    SHARE.with(|s| *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_alone_on_its_lines() {
        assert!(std::mem::align_of::<Share>() >= 128);
    }

    #[test]
    fn a_thread_keeps_its_share_and_threads_spread() {
        let mine = thread_share();
        assert!(mine < SHARES);
        assert_eq!(mine, thread_share());
        let theirs: std::collections::HashSet<usize> = (0..2 * SHARES)
            .map(|_| std::thread::spawn(thread_share).join().unwrap())
            .collect();
        assert!(theirs.len() > 1, "every thread took share {theirs:?}");
    }
}
