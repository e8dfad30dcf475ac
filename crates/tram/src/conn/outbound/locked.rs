//! The queue held locked across several steps, for a side whose own state
//! lives in its encoder (the client's call table): changing that state and
//! queueing the frames the change calls for then take the lock once, not
//! once for the state and once per frame. On a connection whose callers run
//! on several threads, each acquisition is a pair of locked operations on a
//! line they all write.
//!
//! What the pushes decide (wake the writer task, or write inline) is done
//! once the lock is released, as [`Sender::try_send`] does it.

use parking_lot::MutexGuard;

use super::state::{AfterPush, Pipe, Shared, State, unbounded};
use super::{Encoder, Error, Sender, TrySendError};

/// A [`Sender`]'s queue, locked until the guard drops.
#[must_use = "the queue stays locked only while the guard lives"]
pub(crate) struct Locked<'a, E> {
    // Fields drop in order: the lock is released before `then` acts.
    st: MutexGuard<'a, State<E>>,
    then: Then<'a, E>,
}

/// What the pushes under a [`Locked`] decided, carried out when it drops.
struct Then<'a, E> {
    sender: &'a Sender<E>,
    wake_writer: bool,
    /// Taken by a push to write inline.
    pipe: Option<Box<Pipe>>,
}

impl<'a, E> Locked<'a, E> {
    pub(super) fn new(sender: &'a Sender<E>) -> Locked<'a, E> {
        Locked {
            st: sender.shared.state.lock(),
            then: Then {
                sender,
                wake_writer: false,
                pipe: None,
            },
        }
    }

    /// The encoder, and whatever state it keeps.
    #[inline]
    pub(crate) fn encoder(&self) -> &E {
        &self.st.encoder
    }

    /// The encoder, to change its state.
    #[inline]
    pub(crate) fn encoder_mut(&mut self) -> &mut E {
        &mut self.st.encoder
    }

    /// The connection's shared part and the locked state, for a step of the
    /// sender's own under this lock; what it decides goes to [`Locked::after`].
    pub(super) fn parts(&mut self) -> (&'a Shared<E>, &mut State<E>) {
        (&self.then.sender.shared, &mut self.st)
    }

    /// [`Sender::try_push`] under this lock.
    pub(crate) fn try_push<T>(&mut self, item: T, inline: bool) -> Result<(), TrySendError<T>>
    where
        E: Encoder<T>,
    {
        self.push(item, inline, true)
    }

    /// [`Sender::force_send`] under this lock.
    pub(crate) fn force_send<T>(&mut self, item: T) -> Result<(), Error>
    where
        E: Encoder<T>,
    {
        self.push(item, true, false).map_err(unbounded)
    }

    fn push<T>(&mut self, item: T, inline: bool, bounded: bool) -> Result<(), TrySendError<T>>
    where
        E: Encoder<T>,
    {
        let shared = &self.then.sender.shared;
        let then = shared.push(&mut self.st, item, inline, bounded)?;
        self.after(then);
        Ok(())
    }

    /// [`Sender::close`] under this lock.
    pub(crate) fn close(&mut self) {
        let then = self.st.close();
        self.after(then);
    }

    /// Carries out what a step decided once the lock is released.
    pub(super) fn after(&mut self, then: AfterPush) {
        match then {
            AfterPush::Nothing => {}
            AfterPush::WakeWriter => self.then.wake_writer = true,
            // Only the first push finds the pipe idle; what later ones
            // queue, the inline writer's second round takes.
            AfterPush::WriteInline(pipe) => self.then.pipe = Some(pipe),
        }
    }
}

impl<E> Drop for Then<'_, E> {
    fn drop(&mut self) {
        if let Some(pipe) = self.pipe.take() {
            self.sender.shared.write_inline(pipe);
        }
        if self.wake_writer {
            self.sender.shared.wake_writer.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::super::channel;
    use crate::conn::{Config, ErrorKind, LengthDelimited, TrySendError};

    /// A sender over a loopback connection, its writer task running, and
    /// the peer's end.
    async fn pair(config: Config) -> (super::Sender<LengthDelimited>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (ours, theirs) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (_read, write) = ours.unwrap().into_split();
        let (sender, writer) = channel(LengthDelimited::new(), write, config);
        tokio::spawn(writer);
        (sender, theirs.unwrap().0)
    }

    // Two workers: the writer task is free to run elsewhere while the lock
    // is held (which is never held across an await).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_queued_under_the_lock_are_written_in_order_once_it_drops() {
        let (sender, mut peer) = pair(Config::default()).await;
        let mut locked = sender.lock();
        locked.try_push(&b"one"[..], true).unwrap();
        locked.force_send(&b"two"[..]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let mut byte = [0u8; 1];
        let early = peer.try_read(&mut byte);
        assert!(
            matches!(&early, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "nothing is written while the lock is held: {early:?}"
        );
        drop(locked);
        let mut got = vec![0u8; 2 * 4 + 6];
        tokio::time::timeout(Duration::from_secs(10), peer.read_exact(&mut got))
            .await
            .expect("written once the lock drops")
            .unwrap();
        assert_eq!(got, b"\0\0\0\x03one\0\0\0\x03two");
    }

    #[tokio::test]
    async fn a_full_queue_hands_the_item_back_and_close_refuses_later_sends() {
        let (sender, _peer) = pair(Config::default().max_queued_bytes(8)).await;
        {
            // Corked, the first frame stays queued instead of being written.
            let cork = sender.cork();
            let mut locked = sender.lock();
            locked.try_push(&b"12345678"[..], true).unwrap();
            match locked.try_push(&b"x"[..], true) {
                Err(TrySendError::Full(item)) => assert_eq!(item, &b"x"[..]),
                other => panic!("expected Full, got {other:?}"),
            }
            drop(locked);
            drop(cork);
        }
        sender.lock().close();
        let err = sender.send(&b"late"[..]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Closed);
    }
}
