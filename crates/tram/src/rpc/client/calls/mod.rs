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
//! On a multi-threaded runtime, unary callers answered by one read of up
//! to `RELAY_READ` answers are woken as a relay: the reader wakes the
//! first two, and each caller that takes its answer (or gives up) wakes
//! the next. A task woken from a worker goes to that worker's LIFO slot
//! and runs next, there; woken all at once, a read's callers queue up
//! behind it and the other worker, notified, steals half of them, and a
//! late one waits for the whole queue: the relay shortens the tail of a
//! loaded connection. A longer read's callers are woken as a fan: the
//! reader wakes `FAN_HEADS` of them and each caller that takes its answer
//! wakes two more, the one that runs next from the LIFO slot and one the
//! other worker can steal (a chain that long stalls whole while its
//! worker is preempted, since a task in the LIFO slot cannot be stolen).
//! (A current-thread runtime has no LIFO slot; there the reader wakes
//! every caller at once.)
//! A caller woken that does not poll its call stalls the relay (or its
//! branch of the fan), so the reader wakes all the callers left on either
//! `RELAY_FLUSH` after the relay began: a relay is never the only thing a
//! caller waits for.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use tram_wire::{CallId, Cancel, Code, End, Frame, MessageRun, Settings};

use super::super::Status;
use super::super::protocol::{self, ProtocolError};
use super::super::stream::CallShared;
use super::super::unary::{Answer, UnaryAnswer};

mod ids;
use ids::Ids;

/// A read answering more calls than this, with small answers, wakes
/// [`FAN_HEADS`] of them and each caller that takes its answer wakes two
/// more (a fan); up to this many, it wakes two, each the head of a relay
/// through the rest. Measured, not derived: two heads did better at 32
/// calls in flight than one (a relay of one head leaves the other worker
/// idle). A long read's callers woken one after another run a few at a
/// time from the worker's LIFO slot and then spill to the other worker
/// over and over, a wake-up of it each time; and a chain stalls whole
/// while its worker is preempted, for a task in the LIFO slot cannot be
/// stolen. Woken at once they queue up behind each other on one worker
/// until the other steals half. A fan keeps the next caller in the LIFO slot and
/// one more where the other worker can take it.
const RELAY_READ: usize = 32;

/// The callers a long read wakes itself, the heads of its fan. Measured:
/// at 256 calls in flight 4 did better than 2 and 8, each better than
/// every caller at once.
const FAN_HEADS: usize = 4;

/// Answers this large on average (bytes read per caller answered) make a
/// read one relay whatever its length: with 16 KiB answers one head made
/// 5% more calls per second than two (the second worker's share then costs
/// more in wake-ups and in the socket's lock than it saves).
const LARGE_ANSWER: usize = 4096;

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
    /// Unary callers answered, not yet woken: each caller that completes
    /// (or gives up) wakes the first.
    relay: VecDeque<Waker>,
    /// The same for long reads: each wakes the first two.
    fan: VecDeque<Waker>,
    /// When the connection's deadline timer is set to ring, if it is: at
    /// or before the earliest deadline of a call open.
    next_deadline: Option<Instant>,
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
            relay: VecDeque::new(),
            fan: VecDeque::new(),
            next_deadline: None,
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

    /// Of the callers `fx` is to wake, leaves the first two and queues the
    /// rest on the relay; for a read of more than [`RELAY_READ`], leaves
    /// [`FAN_HEADS`] and queues the rest on the fan; for answers of
    /// [`LARGE_ANSWER`] bytes or more on average (in `read` bytes), leaves
    /// only the first. Returns whether any caller is left waiting.
    pub(crate) fn relay(&mut self, fx: &mut Effects, read: usize) -> bool {
        let n = fx.wake.len();
        if read >= n * LARGE_ANSWER {
            self.relay.extend(fx.wake.drain(n.min(1)..));
        } else if n <= RELAY_READ {
            self.relay.extend(fx.wake.drain(n.min(2)..));
        } else {
            self.fan.extend(fx.wake.drain(FAN_HEADS..));
        }
        !(self.relay.is_empty() && self.fan.is_empty())
    }

    /// The callers for one that completed to wake, in the order to wake
    /// them: two of a fan, or else the next of the relay. A task woken
    /// from a worker goes to its LIFO slot and pushes the one woken before
    /// out to the worker's queue, where the other worker can take it: the
    /// last is the one that runs next.
    pub(crate) fn pass_on(&mut self) -> [Option<Waker>; 2] {
        match self.fan.pop_front() {
            Some(next) => [self.fan.pop_front(), Some(next)],
            None => [None, self.relay.pop_front()],
        }
    }

    /// Every caller left on the relay or the fan is to be woken now.
    pub(crate) fn flush_relay(&mut self, fx: &mut Effects) {
        fx.wake.extend(self.fan.drain(..));
        fx.wake.extend(self.relay.drain(..));
    }

    /// Registers a call: its id, and whether it is the only one open.
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
        Ok((id, self.entries.len() == 1))
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
            let (Some(at), State::Unary { answer, waker }) = (entry.deadline, &mut entry.state)
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
        let State::Unary { answer, waker } = &mut entry.state else {
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

    /// The caller is done with call `id`, finished or not; `sent`: its
    /// CALL went out, `code`: the code of the CANCEL if one is due.
    pub(crate) fn release(&mut self, id: CallId, sent: bool, code: Code, fx: &mut Effects) {
        // A caller giving up may have been woken by the relay: it passes
        // it on.
        fx.wake.extend(self.pass_on().into_iter().flatten());
        let broken = self.broken.is_some();
        let Some(entry) = self.entries.get_mut(id as usize) else {
            return;
        };
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
                    State::Unary { answer, waker } => {
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
                    self.ended(m.call, fx);
                }
                Ok(())
            }
            Frame::End(e) => {
                let id = e.call;
                let entry = self.open_entry(id, "END")?;
                entry.server_done = true;
                sample(entry.opened, failure(e.code), fx);
                match &mut entry.state {
                    State::Unary { answer, waker } => {
                        answer.end(e);
                        fx.wake.extend(waker.take());
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
        self.flush_relay(fx);
        let mut gone = Vec::new();
        for (id, entry) in self.entries.iter_mut() {
            if !entry.server_done {
                sample(entry.opened, true, fx);
            }
            entry.server_done = true;
            entry.client_open = false;
            match &mut entry.state {
                State::Unary { answer, waker } => {
                    answer.fail(why);
                    fx.wake.extend(waker.take());
                }
                State::Stream(s) => s.abort(why.clone()),
            }
            if entry.abandoned {
                gone.push(id as CallId);
            }
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
