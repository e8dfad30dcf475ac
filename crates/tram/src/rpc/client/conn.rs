//! One connection of a channel: its outbound queue and its call table,
//! which the queue's encoder keeps under the queue's one lock, shared by
//! the callers (opening and releasing calls, queueing their frames) and
//! the reader (routing the server's frames). A unary caller on the fast
//! path takes its answer from its own slot, without the lock
//! (`calls::slot`). Sending happens on the caller's task.

use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tram_wire::{Call, CallId, Code, Metadata};

use super::super::Status;
use super::super::codec::{EncodeError, Open, RpcEncoder};
use super::super::intercept::ClientInterceptor;
use super::super::stream::CallShared;
use super::super::unary::Answer;
use super::calls::{AnswerSlot, CallKind, Calls, Effects, Refused, SharedRelay, SlotPtr};
use super::deadlines::DeadlineTimer;
use super::share::ConnRef;
use crate::balance::endpoint::{Stats, nanos};
use crate::conn::{self, Locked, Sender};
use crate::observe::ConnectionInfo;

/// One connection's client side.
pub(crate) struct ClientConn {
    /// The outbound queue; its encoder keeps the call table
    /// ([`ClientConn::calls`]).
    pub(super) out: Sender<RpcEncoder>,
    /// Set once the table is broken, readable without the lock.
    unusable: AtomicBool,
    /// Calls open, published for the pool's least-loaded choice.
    pub(crate) in_flight: AtomicUsize,
    /// `in_flight` is kept (the pool has more than one connection to
    /// choose from).
    publish_load: bool,
    /// Wakes callers waiting for a free slot.
    pub(super) capacity: Notify,
    /// The credit window this side advertised.
    window: u32,
    wait_for_capacity: bool,
    interceptor: Option<ClientInterceptor>,
    /// The server's address, when connected over TCP.
    pub(super) peer: Option<SocketAddr>,
    opened: std::time::Instant,
    /// Bytes read, as the reader last published.
    pub(super) received: AtomicU64,
    /// The channel is gone: close once the last call ends.
    abandoned: AtomicBool,
    /// Where its calls' times and outcomes go, when its channel balances.
    stats: Option<Arc<Stats>>,
    /// The timer for its unary calls' deadlines.
    pub(super) deadlines: DeadlineTimer,
    /// The unary callers a read answered, to wake one after another (a
    /// lock of its own, held for a pop: see `calls::relay`).
    pub(super) relay: SharedRelay,
}

/// Why [`ClientConn::try_open_unary`] did not open the call.
pub(super) enum NotOpened {
    /// The call fails with this.
    Failed(Status),
    /// It must wait (for capacity, or queue room): take the general path,
    /// with the metadata as intercepted.
    Later(Metadata),
}

impl ClientConn {
    pub(super) fn new(
        out: Sender<RpcEncoder>,
        window: u32,
        publish_load: bool,
        wait_for_capacity: bool,
        interceptor: Option<ClientInterceptor>,
        peer: Option<SocketAddr>,
        stats: Option<Arc<Stats>>,
    ) -> ClientConn {
        ClientConn {
            out,
            unusable: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            publish_load,
            capacity: Notify::new(),
            window,
            wait_for_capacity,
            interceptor,
            peer,
            opened: std::time::Instant::now(),
            received: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
            stats,
            deadlines: DeadlineTimer::default(),
            relay: SharedRelay::default(),
        }
    }

    /// The time to open a call at (on the balancer's clock), if its calls
    /// are timed; 0 if not.
    #[inline]
    fn clock(&self) -> u64 {
        match self.stats {
            Some(_) => nanos(tokio::time::Instant::now()),
            None => 0,
        }
    }

    /// Its clock's time now, if its calls are timed.
    pub(super) fn now(&self) -> Option<u64> {
        self.stats
            .as_ref()
            .map(|_| nanos(tokio::time::Instant::now()))
    }

    /// Whether its calls are timed (the reader then reads the clock per
    /// batch of frames).
    pub(super) fn timed(&self) -> bool {
        self.stats.is_some()
    }

    /// The channel that opened the connection is gone: it closes now, or
    /// when the calls still open on it end.
    pub(crate) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
        let mut calls = self.calls();
        self.close_if_abandoned(&mut calls);
    }

    fn close_if_abandoned(&self, calls: &mut CallsGuard<'_>) {
        if calls.len() == 0 && self.abandoned.load(Ordering::Relaxed) {
            calls.out().close();
        }
    }

    /// The call table, locked. It lives in the outbound queue's encoder,
    /// under the queue's lock: opening a call and queueing its CALL take
    /// that one lock, and each acquisition is a pair of locked operations
    /// on a line every caller's thread writes.
    #[inline]
    pub(super) fn calls(&self) -> CallsGuard<'_> {
        CallsGuard(self.out.lock())
    }

    /// A snapshot of the connection.
    pub(crate) fn info(&self) -> ConnectionInfo {
        let (calls, started, going_away) = {
            let calls = self.calls();
            (calls.len(), calls.started(), calls.broken().is_some())
        };
        ConnectionInfo::new(
            self.peer,
            self.opened.elapsed(),
            calls,
            started,
            self.out.queued_bytes(),
            self.received.load(Ordering::Relaxed),
            self.out.bytes_written(),
            going_away || !self.usable(),
        )
    }

    pub(crate) fn usable(&self) -> bool {
        !self.unusable.load(Ordering::Acquire)
    }

    /// Carries out what the table asked for, `calls` being its guard:
    /// frames are queued before the lock goes (a CANCEL before its id can
    /// be reused), callers woken after (so that they do not wake only to
    /// wait for it).
    pub(super) fn apply(&self, mut calls: CallsGuard<'_>, fx: &mut Effects) {
        for frame in fx.send.drain(..) {
            let _ = calls.out().force_send(frame);
        }
        if let (Some(stats), Some(now)) = (&self.stats, fx.now) {
            for (rtt, failed) in fx.samples.drain(..) {
                stats.observe(rtt, failed, now);
            }
        }
        if calls.broken().is_some() {
            self.unusable.store(true, Ordering::Release);
        }
        let freed = std::mem::take(&mut fx.freed);
        if freed > 0 {
            self.publish(&calls);
            self.close_if_abandoned(&mut calls);
        }
        // Only when someone waits: `notify_one` is a write to a line every
        // caller's thread would otherwise share.
        let notify = freed.min(calls.capacity_waiters);
        drop(calls);
        for _ in 0..notify {
            self.capacity.notify_one();
        }
        fx.wake.drain(..).for_each(Waker::wake);
    }

    /// Publishes the number of calls open, for the pool.
    fn publish(&self, calls: &Calls) {
        if self.publish_load {
            self.in_flight.store(calls.len(), Ordering::Relaxed);
        }
    }

    pub(super) fn new_shared(&self) -> Arc<CallShared> {
        let peer = self.calls().peer;
        CallShared::new(self.window, peer.initial_credit)
    }

    /// The call's metadata, through the client interceptor if any.
    pub(super) fn intercept(&self, path: &str, metadata: Metadata) -> Result<Metadata, Status> {
        match &self.interceptor {
            Some(i) => i.apply(path, metadata),
            None => Ok(metadata),
        }
    }

    pub(super) fn broken_status(&self) -> Status {
        self.calls()
            .broken()
            .cloned()
            .unwrap_or_else(|| Status::unavailable("connection closed"))
    }

    /// Polls a unary call; when it returns `Ready` the call's entry is
    /// gone (set [`CallHandle::freed`]) and the next caller of the relay
    /// is woken.
    pub(super) fn poll_unary(
        &self,
        id: CallId,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Answer, Status>> {
        let mut calls = self.calls();
        let outcome = calls.poll_unary(id, cx);
        if outcome.is_ready() {
            self.publish(&calls);
            self.close_if_abandoned(&mut calls);
            if calls.capacity_waiters > 0 {
                self.capacity.notify_one();
            }
            drop(calls);
            self.pass_on();
        }
        outcome
    }

    /// Whether the answer of unary call `id` is in `slot`, checked under
    /// the table's lock; if not, its caller is now woken through `cx`.
    pub(super) fn poll_slot(&self, id: CallId, slot: &AnswerSlot, cx: &mut Context<'_>) -> bool {
        let mut calls = self.calls();
        if slot.is_ready() {
            return true;
        }
        calls.set_waker(id, cx.waker());
        false
    }

    /// Wakes the callers a unary caller that is done (answered, or giving
    /// up) passes the relay on to. A task woken from a worker goes to its
    /// LIFO slot, pushing the one woken before out to the worker's queue:
    /// the last is the one that runs next.
    pub(super) fn pass_on(&self) {
        let next = self.relay.pass_on();
        for w in next.into_iter().flatten() {
            w.wake();
        }
    }

    /// The caller is done with call `id`, finished or not.
    fn release(&self, id: CallId, sent: bool, code: Code) {
        let mut fx = Effects::default();
        let mut calls = self.calls();
        calls.release(id, sent, code, &mut fx);
        self.apply(calls, &mut fx);
        // A caller giving up may have been woken by the relay: it passes
        // it on.
        self.pass_on();
    }

    /// Ends our direction of call `id`; whether the server's has ended too.
    pub(super) fn half_close(&self, id: CallId) -> bool {
        let mut fx = Effects::default();
        let mut calls = self.calls();
        let server_done = calls.half_close(id, &mut fx);
        self.apply(calls, &mut fx);
        server_done
    }

    /// The connection is gone: fails every call with `why`.
    pub(super) fn fail_all(&self, why: &Status) {
        let mut fx = Effects {
            now: self.now(),
            ..Effects::default()
        };
        let mut calls = self.calls();
        calls.fail_all(why, &mut fx);
        self.relay.flush(&mut fx);
        self.apply(calls, &mut fx);
        self.capacity.notify_waiters();
    }
}

/// What a caller does with its reference to a connection.
impl ConnRef {
    /// Registers a call and sends its CALL frame, waiting for a free slot
    /// and for queue room as needed; `metadata` has been intercepted.
    pub(super) async fn open<M: prost::Message>(
        &self,
        path: &str,
        msg: Option<&M>,
        metadata: Metadata,
        timeout: Option<Duration>,
        end_stream: bool,
        shared: Option<Arc<CallShared>>,
    ) -> Result<CallHandle, Status> {
        // The first check registers nothing; only after finding no room is a
        // wake-up registered, and the check repeated before waiting, so that
        // a slot freed (notify_one: a stored permit) or the connection
        // breaking (caught by the re-check) is never missed.
        let mut registered = None;
        // Counted among the capacity waiters from the first registration
        // until a slot is ours (or the future is dropped).
        let mut waiting = CapacityWaiter {
            conn: self,
            counted: false,
        };
        let (id, alone) = loop {
            {
                let mut calls = self.calls();
                if waiting.counted {
                    calls.capacity_waiters -= 1;
                    waiting.counted = false;
                }
                let kind = match &shared {
                    Some(s) => CallKind::Stream(s.clone()),
                    None => CallKind::Unary(None),
                };
                match calls.open(kind, end_stream, self.clock()) {
                    Ok(opened) => {
                        self.publish(&calls);
                        break opened;
                    }
                    Err(Refused::Broken(s)) => return Err(s.not_sent()),
                    Err(Refused::Full) if !self.wait_for_capacity => {
                        return Err(Status::resource_exhausted(
                            "connection at the server's max_concurrent_calls",
                        ));
                    }
                    Err(Refused::Full) => {
                        calls.capacity_waiters += 1;
                        waiting.counted = true;
                    }
                }
            }
            match registered.take() {
                Some(notified) => notified.await,
                None => registered = Some(self.capacity.notified()),
            }
        };
        // Alone on the connection, a call is written at once, inline; with
        // other calls in flight, their callers are about to send too (woken
        // by one read, most likely), so the call is queued for the writer
        // task's next batch: one write for them all.
        let mut handle = self.clone().handle(id);
        let mut head = call_head(id, end_stream, timeout, metadata);
        let open = Open {
            path,
            head: &mut head,
            msg,
        };
        match self.out.send_hinted(open, alone).await {
            Ok(()) => {
                handle.sent = true;
                Ok(handle)
            }
            // Not queued: the call never left.
            Err(e) if going_away(&e) => Err(self.broken_status().not_sent()),
            Err(e) if e.kind() == conn::ErrorKind::Encode => {
                Err(Status::resource_exhausted(format!("request not sent: {e}")))
            }
            Err(_) => Err(self.broken_status().not_sent()),
        }
    }

    /// Opens a unary call without waiting: registers it with `waker` and
    /// `slot`, where its answer is to go, and queues its CALL frame, or
    /// says why not.
    ///
    /// # Safety
    ///
    /// `slot` stays where it is until it is ready or the returned handle
    /// has let go of it ([`CallHandle::let_go`]).
    #[allow(clippy::too_many_arguments, unsafe_code)]
    pub(super) unsafe fn try_open_unary<M: prost::Message>(
        self,
        path: &str,
        msg: &M,
        metadata: Metadata,
        // The timeout sent, and the deadline it makes here.
        timeout: Option<(Duration, Instant)>,
        waker: &Waker,
        slot: &AnswerSlot,
        picked: u64,
    ) -> Result<CallHandle, NotOpened> {
        let deadline = timeout.map(|(_, at)| at);
        let metadata = self.intercept(path, metadata).map_err(NotOpened::Failed)?;
        // The call is registered and its CALL queued under one lock. As in
        // `open`, a lone call is written inline (once the lock is released),
        // one among others queued for the writer task's next batch.
        let mut calls = self.calls();
        let opened = if self.stats.is_some() { picked } else { 0 };
        // SAFETY: as this function's caller promises.
        let kind = CallKind::UnaryTo(waker.clone(), unsafe { SlotPtr::new(slot) });
        let (id, alone) = match calls.open_until(kind, true, opened, deadline) {
            Ok(opened) => {
                self.publish(&calls);
                opened
            }
            // Not sent: the general path takes another connection.
            Err(Refused::Broken(_)) => return Err(NotOpened::Later(metadata)),
            Err(Refused::Full) => return Err(NotOpened::Later(metadata)),
        };
        let mut head = call_head(id, true, timeout.map(|(t, _)| t), metadata);
        let open = Open {
            path,
            head: &mut head,
            msg: Some(msg),
        };
        let pushed = calls.out().try_push(open, alone);
        let set_timer = deadline.filter(|&at| calls.deadline_to_set(at));
        // Released before the handle exists: an unsent handle lets go of
        // its call under the lock.
        drop(calls);
        if let Some(at) = set_timer {
            self.deadlines.set(at);
        }
        // The handle takes over the caller's reference to the connection
        // (a reference count is a line every caller's thread shares).
        let mut handle = self.handle(id);
        match pushed {
            Ok(()) => {
                handle.sent = true;
                Ok(handle)
            }
            // Refused for a GOAWAY the reader just handled, or closed:
            // the general path takes another connection. Letting go of
            // the unsent handle frees the entry.
            Err(conn::TrySendError::Full(_) | conn::TrySendError::Closed(_)) => {
                handle.let_go(slot);
                Err(NotOpened::Later(head.metadata.unwrap_or_default()))
            }
            Err(conn::TrySendError::Encode(e)) if going_away(&e) => {
                handle.let_go(slot);
                Err(NotOpened::Later(head.metadata.unwrap_or_default()))
            }
            Err(conn::TrySendError::Encode(e)) => {
                handle.let_go(slot);
                Err(NotOpened::Failed(Status::resource_exhausted(format!(
                    "request not sent: {e}"
                ))))
            }
        }
    }

    /// The caller's handle on call `id`, not yet sent.
    fn handle(self, id: CallId) -> CallHandle {
        CallHandle {
            conn: self,
            id,
            sent: false,
            done: false,
            freed: false,
        }
    }
}

/// The encoder refused a CALL because the server is going away.
fn going_away(e: &conn::Error) -> bool {
    e.downcast_ref::<EncodeError>() == Some(&EncodeError::GoingAway)
}

/// A CALL frame's fields (the method is filled in by the encoder).
fn call_head(id: CallId, end_stream: bool, timeout: Option<Duration>, metadata: Metadata) -> Call {
    Call {
        call: id,
        method: 0,
        end_stream,
        timeout_micros: timeout.map(|t| t.as_micros().min(u128::from(u64::MAX)) as u64),
        metadata: (!metadata.is_empty()).then_some(metadata),
        message: None,
    }
}

/// A caller counted in `Calls::capacity_waiters`; uncounts itself if the
/// wait is abandoned.
struct CapacityWaiter<'a> {
    conn: &'a ClientConn,
    counted: bool,
}

impl Drop for CapacityWaiter<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.conn.calls().capacity_waiters -= 1;
        }
    }
}

/// The caller's hold on a call; dropping it before the call finished
/// cancels the call on the server.
pub(super) struct CallHandle {
    pub(super) conn: ConnRef,
    pub(super) id: CallId,
    sent: bool,
    /// The call ended as far as the caller cares: a drop sends no CANCEL
    /// with an error code.
    pub(super) done: bool,
    /// The entry is already gone (a unary call that completed).
    pub(super) freed: bool,
}

impl CallHandle {
    /// The call completed and its entry is gone.
    pub(super) fn completed(&mut self) {
        (self.done, self.freed) = (true, true);
    }

    /// The caller is done with a unary call opened with `slot`, answered
    /// or not; dropping the handle instead would release the call's id,
    /// which may be another call's once the answer is in the slot.
    pub(super) fn let_go(mut self, slot: &AnswerSlot) {
        if !slot.is_ready() {
            let code = if self.done { Code::Ok } else { Code::Cancelled };
            let mut fx = Effects::default();
            let mut calls = self.conn.calls();
            // Ready is set under this lock with the entry's removal: not
            // ready here, the entry is still this call's, and releasing it
            // detaches the slot.
            if !slot.is_ready() {
                calls.release(self.id, self.sent, code, &mut fx);
            }
            self.conn.apply(calls, &mut fx);
        }
        self.freed = true;
        self.conn.pass_on();
    }
}

impl Drop for CallHandle {
    fn drop(&mut self) {
        if self.freed {
            return;
        }
        let code = if self.done { Code::Ok } else { Code::Cancelled };
        self.conn.release(self.id, self.sent, code);
    }
}

/// The call table under the outbound queue's lock ([`ClientConn::calls`]).
/// Frames queued through [`CallsGuard::out`] are written, or the writer
/// woken, once it drops.
pub(super) struct CallsGuard<'a>(Locked<'a, RpcEncoder>);

impl<'a> CallsGuard<'a> {
    /// The queue, to push frames under this lock.
    #[inline]
    pub(super) fn out(&mut self) -> &mut Locked<'a, RpcEncoder> {
        &mut self.0
    }
}

impl Deref for CallsGuard<'_> {
    type Target = Calls;
    #[inline]
    fn deref(&self) -> &Calls {
        &self.0.encoder().calls
    }
}

impl DerefMut for CallsGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Calls {
        &mut self.0.encoder_mut().calls
    }
}
