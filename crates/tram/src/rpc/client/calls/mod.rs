//! The client's side of one connection's calls, as pure code: callers open
//! and release calls, the server's frames answer them, and every change
//! says what the connection must do (frames to send, callers to wake, slots
//! freed) without touching a socket or a task. The connection keeps it in
//! its outbound queue's encoder, under the queue's lock, shared by its
//! callers and its reader (`conn::CallsGuard`).
//!
//! Calls live in a table keyed by call id (`ids`): a new call takes the id
//! freed last, but ids are kept under 128 while fewer calls than that are
//! in flight, as PROTOCOL.md asks. A unary call keeps its answer inline
//! (no allocation per call); a streaming call shares a `CallShared` with
//! its handles.
//!
//! A unary call opened with an [`AnswerSlot`] (the common case: the
//! caller's future holds the slot) is handed its answer there: the reader
//! writes it and frees the entry under the lock, and the caller takes it
//! without the lock (`slot`). Callers answered by one read are woken as a
//! relay (`relay`), under a lock of its own.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tram_wire::{CallId, Cancel, Code, End, Frame, MessageRun, Settings};

use super::super::Status;
use super::super::protocol::{self, ProtocolError};
use super::super::stream::CallShared;
use super::super::unary::{Answer, UnaryAnswer};

mod ids;
mod relay;
mod slot;
use ids::Ids;
#[cfg(test)]
use relay::Relay;
pub(crate) use relay::SharedRelay;
pub(crate) use slot::{AnswerSlot, SlotPtr};

/// The calls of one connection.
pub(crate) struct Calls {
    entries: Ids<Entry>,
    /// Callers waiting for a free slot.
    pub(crate) capacity_waiters: usize,
    /// Why the connection cannot take new calls.
    broken: Option<Status>,
    /// The server's limits, once its SETTINGS arrived.
    pub(crate) peer: Settings,
    /// Calls opened so far.
    started: u64,
    /// When the connection's deadline timer is set to ring, if it is: at
    /// or before the earliest deadline of a call open.
    next_deadline: Option<Instant>,
    /// Unary callers the reader's last run of frames answered. Their
    /// entries are freed as the answers are handed over, before the callers
    /// run: a caller opening its next call then may find its entry the only
    /// one while the others answered with it are about to open theirs.
    last_answered: usize,
}

/// What the connection must do after the table changed: the frames go out
/// before the table's lock is released (so that a CANCEL reaches the wire
/// before its id can be reused), the wake-ups after.
#[derive(Default)]
pub(crate) struct Effects {
    pub(crate) send: Vec<Frame>,
    pub(crate) wake: Vec<Waker>,
    /// Calls freed: as many callers waiting for a slot may go.
    pub(crate) freed: usize,
    /// When the frames being handled were read (nanoseconds on the
    /// balancer's clock, `balance::endpoint::nanos`), if calls are timed.
    pub(crate) now: Option<u64>,
    /// Calls that ended, timed: how long each took (nanoseconds), and
    /// whether it failed (for the endpoint's load and health).
    pub(crate) samples: Vec<(u64, bool)>,
}

/// Why a call could not be opened now.
pub(crate) enum Refused {
    /// The connection is unusable: fail the call with this.
    Broken(Status),
    /// At the server's `max_concurrent_calls`.
    Full,
}

/// What a call is waiting for.
pub(crate) enum CallKind {
    /// One response, collected in the table, and the caller to wake.
    Unary(Option<Waker>),
    /// One response, handed over in the caller's slot once complete.
    UnaryTo(Waker, SlotPtr),
    /// A stream, in state the call's handles share.
    Stream(Arc<CallShared>),
}

/// Aligned to a cache line, and two lines long: a call's entry is written
/// by its caller and by the connection's reader, often on different
/// cores, and an entry sharing a line with its neighbours would move it
/// for their callers too.
#[repr(align(64))]
struct Entry {
    state: State,
    /// A response message has arrived (leading metadata only comes on the
    /// first).
    answered: bool,
    /// The client may still send (we have not closed our direction).
    client_open: bool,
    server_done: bool,
    /// The caller is gone; free the entry when the call is closed.
    abandoned: bool,
    /// When it was opened (on the balancer's clock; 0: not timed).
    opened: u64,
    /// A unary call's deadline, whose caller is woken once it passes.
    deadline: Option<Instant>,
}

enum State {
    Unary {
        answer: UnaryAnswer,
        waker: Option<Waker>,
        /// Where the answer goes once complete (the entry is then freed),
        /// if the caller gave one.
        slot: Option<SlotPtr>,
    },
    Stream(Arc<CallShared>),
}

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calls")
            .field("open", &self.len())
            .finish_non_exhaustive()
    }
}

impl Calls {
    pub(crate) fn new() -> Calls {
        Calls {
            entries: Ids::new(),
            capacity_waiters: 0,
            broken: None,
            peer: Settings::DEFAULT,
            started: 0,
            next_deadline: None,
            last_answered: 0,
        }
    }

    /// Calls open.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Calls opened so far.
    pub(crate) fn started(&self) -> u64 {
        self.started
    }

    /// Why the connection takes no new calls, if it does not.
    pub(crate) fn broken(&self) -> Option<&Status> {
        self.broken.as_ref()
    }

    /// Takes no new calls from now on, failing them with `why`.
    pub(crate) fn mark_broken(&mut self, why: Status) {
        self.broken.get_or_insert(why);
    }

    /// The reader's run of frames just handled answered `n` unary callers.
    pub(crate) fn answered(&mut self, n: usize) {
        self.last_answered = n;
    }

    /// Registers a call: its id, and whether it is the only one open (and
    /// the last read answered no other caller).
    pub(crate) fn open(
        &mut self,
        kind: CallKind,
        end_stream: bool,
        opened: u64,
    ) -> Result<(CallId, bool), Refused> {
        self.open_until(kind, end_stream, opened, None)
    }

    /// [`Calls::open`] for a unary call with a deadline, whose caller is
    /// woken once it passes ([`Calls::expire`]). Until then nothing is
    /// timed per call: the connection's one timer rings at the earliest
    /// deadline, and is set earlier only for a call whose deadline comes
    /// before the one it is set for ([`Calls::deadline_to_set`]).
    pub(crate) fn open_until(
        &mut self,
        kind: CallKind,
        end_stream: bool,
        opened: u64,
        deadline: Option<Instant>,
    ) -> Result<(CallId, bool), Refused> {
        if let Some(s) = &self.broken {
            return Err(Refused::Broken(s.clone()));
        }
        if self.entries.len() >= self.peer.max_concurrent_calls as usize {
            return Err(Refused::Full);
        }
        let state = match kind {
            CallKind::Unary(waker) => State::Unary {
                answer: UnaryAnswer::default(),
                waker,
                slot: None,
            },
            CallKind::UnaryTo(waker, slot) => State::Unary {
                answer: UnaryAnswer::default(),
                waker: Some(waker),
                slot: Some(slot),
            },
            CallKind::Stream(shared) => State::Stream(shared),
        };
        let id = self.entries.insert(Entry {
            state,
            client_open: !end_stream,
            server_done: false,
            answered: false,
            abandoned: false,
            opened,
            deadline,
        }) as CallId;
        self.started += 1;
        // Alone: no other call in flight, nor about to be opened by a
        // caller answered with this one's last.
        Ok((id, self.entries.len() == 1 && self.last_answered <= 1))
    }

    /// Whether the connection's deadline timer must be set (earlier) for
    /// `deadline`, a call's just opened: if so, it counts as set.
    pub(crate) fn deadline_to_set(&mut self, deadline: Instant) -> bool {
        if self.next_deadline.is_some_and(|at| at <= deadline) {
            return false;
        }
        self.next_deadline = Some(deadline);
        true
    }

    /// The connection's deadline timer rang at `now`: the callers of the
    /// unary calls whose deadline has passed are to be woken (each ends
    /// its call itself, as at any deadline it sees pass). Returns when the
    /// timer is to ring next, the earliest deadline left, if any.
    pub(crate) fn expire(&mut self, now: Instant, fx: &mut Effects) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        for (_, entry) in self.entries.iter_mut() {
            let (Some(at), State::Unary { answer, waker, .. }) = (entry.deadline, &mut entry.state)
            else {
                continue;
            };
            if entry.abandoned || answer.is_done() {
                continue;
            }
            if at <= now {
                fx.wake.extend(waker.clone());
            } else {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        self.next_deadline = next;
        next
    }

    /// Polls a unary call. When it returns `Ready` the call is gone from
    /// the table (one slot freed).
    pub(crate) fn poll_unary(
        &mut self,
        id: CallId,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Answer, Status>> {
        let Some(entry) = self.entries.get_mut(id as usize) else {
            return Poll::Ready(Err(Status::internal("call vanished")));
        };
        let State::Unary { answer, waker, .. } = &mut entry.state else {
            return Poll::Ready(Err(Status::internal("not a unary call")));
        };
        match answer.take() {
            Some(outcome) => {
                self.entries.try_remove(id as usize);
                Poll::Ready(outcome)
            }
            None => {
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    /// The caller of unary call `id`, whose answer is not in yet, is now
    /// woken with `waker`.
    pub(crate) fn set_waker(&mut self, id: CallId, new: &Waker) {
        if let Some(Entry {
            state: State::Unary { waker, .. },
            ..
        }) = self.entries.get_mut(id as usize)
        {
            if !waker.as_ref().is_some_and(|w| w.will_wake(new)) {
                *waker = Some(new.clone());
            }
        }
    }

    /// The caller is done with call `id`, finished or not; `sent`: its
    /// CALL went out, `code`: the code of the CANCEL if one is due. A
    /// slot the call had is detached: nothing is written to it after.
    pub(crate) fn release(&mut self, id: CallId, sent: bool, code: Code, fx: &mut Effects) {
        let broken = self.broken.is_some();
        let Some(entry) = self.entries.get_mut(id as usize) else {
            return;
        };
        if let State::Unary { slot, .. } = &mut entry.state {
            *slot = None;
        }
        if sent && (!entry.server_done || entry.client_open) {
            // Still open on the wire: cancel; the entry goes when the
            // server's END arrives (PROTOCOL.md §6.1).
            fx.send.push(Frame::Cancel(Cancel { call: id, code }));
            entry.client_open = false;
            entry.abandoned = true;
            if let State::Stream(s) = &entry.state {
                s.abort(Status::cancelled("call dropped"));
            }
            if entry.server_done || broken {
                self.free(id, fx);
            }
        } else {
            self.free(id, fx);
        }
    }

    /// Ends our direction of call `id` (a half-close). Returns whether the
    /// server's direction has ended too.
    pub(crate) fn half_close(&mut self, id: CallId, fx: &mut Effects) -> bool {
        let Some(entry) = self.entries.get_mut(id as usize) else {
            return false;
        };
        if entry.client_open {
            entry.client_open = false;
            fx.send.push(Frame::End(End::new(id, Code::Ok)));
        }
        entry.server_done
    }

    /// The server's SETTINGS arrived.
    pub(crate) fn settled(&mut self, peer: Settings) {
        self.peer = peer;
    }

    /// Plain messages of one call: a stream's are queued on it whole; a
    /// unary call takes one (its END follows).
    pub(crate) fn run(&mut self, mut run: MessageRun) -> Result<(), ProtocolError> {
        let id = run.call();
        let entry = self.open_entry(id, "MESSAGE")?;
        entry.answered = true;
        match &mut entry.state {
            State::Stream(s) => protocol::push_run(s, run),
            State::Unary { answer, .. } => match (run.len(), run.next()) {
                (1, Some(payload)) => answer
                    .message(payload, None, false)
                    .map_err(|_| two_responses(id)),
                _ => Err(two_responses(id)),
            },
        }
    }

    /// One frame from the server, after the handshake.
    pub(crate) fn frame(&mut self, frame: Frame, fx: &mut Effects) -> Result<(), ProtocolError> {
        match frame {
            Frame::Message(m) => {
                let entry = self.open_entry(m.call, "MESSAGE")?;
                if std::mem::replace(&mut entry.answered, true) && m.metadata.is_some() {
                    return Err(ProtocolError::new(format!(
                        "leading metadata after the first response on call {}",
                        m.call
                    )));
                }
                match &mut entry.state {
                    State::Unary { answer, waker, .. } => {
                        answer
                            .message(m.payload, m.metadata, m.end_stream)
                            .map_err(|_| two_responses(m.call))?;
                        if m.end_stream {
                            entry.server_done = true;
                            fx.wake.extend(waker.take());
                            sample(entry.opened, false, fx);
                        }
                    }
                    State::Stream(s) => {
                        if let Some(headers) = m.metadata {
                            s.set_headers(headers);
                        }
                        s.push(m.payload).map_err(|_| protocol::no_credit(m.call))?;
                        if m.end_stream {
                            s.close_inbox(Ok(()));
                            entry.server_done = true;
                            sample(entry.opened, false, fx);
                        }
                    }
                }
                if m.end_stream {
                    self.deliver(m.call, fx);
                    self.ended(m.call, fx);
                }
                Ok(())
            }
            Frame::End(e) => {
                let id = e.call;
                let entry = self.open_entry(id, "END")?;
                entry.server_done = true;
                sample(entry.opened, failure(e.code), fx);
                let mut deliver = false;
                match &mut entry.state {
                    State::Unary {
                        answer,
                        waker,
                        slot,
                    } => {
                        answer.end(e);
                        fx.wake.extend(waker.take());
                        deliver = slot.is_some();
                    }
                    State::Stream(s) => {
                        if e.code == Code::Ok {
                            if let Some(t) = &e.trailers {
                                s.set_trailers(t.clone());
                            }
                            s.close_inbox(Ok(()));
                            s.abort(Status::new(Code::Ok, "call ended by the server"));
                        } else {
                            s.abort(Status::from_wire(e));
                        }
                    }
                }
                if entry.client_open {
                    // The server ended first: close our direction too.
                    entry.client_open = false;
                    fx.send.push(Frame::Cancel(Cancel {
                        call: id,
                        code: Code::Cancelled,
                    }));
                }
                if deliver {
                    self.deliver(id, fx);
                }
                self.ended(id, fx);
                Ok(())
            }
            Frame::Credit(c) => match self.entries.get(c.call as usize) {
                Some(Entry {
                    state: State::Stream(s),
                    ..
                }) => protocol::add_credit(s, c.call, c.n),
                _ => Ok(()),
            },
            Frame::GoAway(g) => {
                // No new calls here; calls in flight finish or fail when the
                // connection closes.
                self.mark_broken(Status::unavailable(format!(
                    "server going away: {}",
                    g.message
                )));
                Ok(())
            }
            other => Err(ProtocolError::new(format!(
                "{:?} frame from the server",
                other.frame_type()
            ))),
        }
    }

    /// The connection is gone: every call fails with `why`.
    pub(crate) fn fail_all(&mut self, why: &Status, fx: &mut Effects) {
        self.mark_broken(why.clone());
        let mut gone = Vec::new();
        let mut answered = Vec::new();
        for (id, entry) in self.entries.iter_mut() {
            if !entry.server_done {
                sample(entry.opened, true, fx);
            }
            entry.server_done = true;
            entry.client_open = false;
            match &mut entry.state {
                State::Unary {
                    answer,
                    waker,
                    slot,
                } => {
                    answer.fail(why);
                    fx.wake.extend(waker.take());
                    if slot.is_some() {
                        answered.push(id as CallId);
                    }
                }
                State::Stream(s) => s.abort(why.clone()),
            }
            if entry.abandoned {
                gone.push(id as CallId);
            }
        }
        for id in answered {
            self.deliver(id, fx);
        }
        for id in gone {
            self.free(id, fx);
        }
    }

    /// The entry of `id`, if the server may still send on it; a `what`
    /// frame on any other call is a protocol violation.
    fn open_entry(&mut self, id: CallId, what: &str) -> Result<&mut Entry, ProtocolError> {
        self.entries
            .get_mut(id as usize)
            .filter(|e| !e.server_done)
            .ok_or_else(|| ProtocolError::new(format!("{what} on call {id} not open")))
    }

    /// The server's direction of `id` ended: free it if the caller is gone.
    fn ended(&mut self, id: CallId, fx: &mut Effects) {
        if let Some(e) = self.entries.get(id as usize) {
            if e.abandoned && !e.client_open {
                self.free(id, fx);
            }
        }
    }

    /// Unary call `id` has its answer: if its caller gave a slot, the
    /// answer goes there and the entry is freed.
    #[allow(unsafe_code)]
    fn deliver(&mut self, id: CallId, fx: &mut Effects) {
        let Some(Entry {
            state: State::Unary { answer, slot, .. },
            ..
        }) = self.entries.get_mut(id as usize)
        else {
            return;
        };
        let Some(slot) = slot.take() else {
            return;
        };
        let outcome = answer
            .take()
            .unwrap_or_else(|| Err(Status::internal("call ended without its answer")));
        self.free(id, fx);
        // SAFETY: under the table's lock (the table is only ever reached
        // through it), with the entry that held the pointer freed.
        unsafe { slot.deliver(outcome) };
    }

    fn free(&mut self, id: CallId, fx: &mut Effects) {
        if self.entries.try_remove(id as usize).is_some() {
            fx.freed += 1;
        }
    }
}

/// A timed call ended (failed or not): its sample.
#[inline]
fn sample(opened: u64, failed: bool, fx: &mut Effects) {
    if let (true, Some(now)) = (opened != 0, fx.now) {
        fx.samples.push((now.saturating_sub(opened), failed));
    }
}

/// Whether a call ending with `code` failed for the server's or the
/// network's sake (what ejects an endpoint), rather than answered.
fn failure(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::Internal
            | Code::Unknown
            | Code::DataLoss
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
    )
}

fn two_responses(call: CallId) -> ProtocolError {
    ProtocolError::new(format!("two responses on unary call {call}"))
}

#[cfg(test)]
mod tests;
