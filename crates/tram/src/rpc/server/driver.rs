//! One connection's task on the server: reads frames, lets the call table
//! decide, runs the handlers' futures itself (see `exec`), and keeps the
//! timers. While it handles one turn of frames the outbound queue is
//! corked, so all the answers that are ready go out in one write.

use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use std::net::SocketAddr;
use tokio::sync::watch;
use tokio::time::Instant;

use tram_wire::{CallId, Code, Frame, Metadata, Reason};

use super::super::alarm::Alarm;
use super::super::codec::{Received, RpcEncoder, RunDecoder};
use super::super::exec::{BoxFuture, Exec};
use super::super::protocol::{self, Control, ProtocolError};
use super::super::timers::{TimerEvent, Timers};
use super::super::transport::{self, BoxRead, Halves};
use super::Routes;
use super::builder::ServerConfig;
use super::calls::{Accepted, Effects, Peer, ServerCalls};
use super::handler::{IncomingCall, Route};
use super::lifecycle::{DRAIN_PING, Due, Life};
use super::turn;
use crate::conn::{self, Inbound, Sender};
use crate::observe::limit::violation;
use crate::observe::{CloseReason, ConnStats, Observed, Observers, Registered, observe};

/// A turn of fewer frames than this, all read, writes its answers before
/// it asks the socket for more (see `Driver::turn`).
const FEW_FRAMES: usize = 4;

/// Turns a driver takes per poll before it yields to the worker's other
/// tasks. Several, so that a turn that ends at its bound with nothing left
/// to read ends the poll (the next turn's read finds the socket empty)
/// instead of a wake-up of its own and an empty poll; and so that a loaded
/// connection's driver does not yield to the scheduler after every turn
/// (tokio then wakes an idle worker to steal it).
const TURNS_PER_POLL: usize = 4;

/// Serves the RPC protocol over `halves` until the connection ends, the
/// client breaks the protocol (GOAWAY with the reason), or `stop` asks for
/// a graceful shutdown (GOAWAY, then the calls in flight finish).
///
/// # Errors
///
/// Only a failure to queue the opening SETTINGS.
pub(crate) async fn serve(
    halves: Halves,
    peer: Peer,
    routes: Arc<Routes>,
    config: Arc<ServerConfig>,
    mut stop: watch::Receiver<bool>,
    system: &'static str,
) -> io::Result<()> {
    let settings = config.settings;
    let (mut inbound, out) =
        transport::open(halves, settings, config.conn).map_err(io::Error::other)?;
    let addr = peer.addr;
    let observers = config.observers.clone();
    observers.opened(Some(addr));
    let registered = config.registry.register(ConnStats::new(Some(addr), &out));
    let mut d = Driver {
        calls: ServerCalls::new(
            routes,
            settings,
            config.spawn_handlers,
            config.interceptor.clone(),
            peer,
        ),
        out,
        exec: Exec::new(),
        timers: Timers::new(
            Instant::now(),
            Some(config.handshake_timeout),
            config.idle_timeout,
            config.keepalive,
        ),
        spawn_handlers: config.spawn_handlers,
        observers,
        system,
        addr,
        stats: registered,
        closing: CloseReason::Normal,
        reported: Reported::default(),
        now: None,
        life: Life::new(
            Instant::now(),
            config.max_connection_age,
            u64::from(addr.port()).wrapping_mul(0x9e37_79b9),
        ),
    };
    let mut timer = Alarm::new(Instant::now());
    // Made at the first deadline of a connection's maximum age: one
    // without never registers this timer.
    let mut life_timer: Option<Alarm> = None;
    // Whether the stop signal may have come: a version number read without
    // the channel's lock. The future below is polled to register its
    // wake-up (again if the waker changes), then only when this says so:
    // every connection of the server shares the channel, and polling it
    // locks the channel's list of waiters.
    let signal = stop.clone();
    let mut registered: Option<std::task::Waker> = None;
    // A persistent future, so that its wake-up registration survives polls.
    let mut stopped = pin!(async move {
        while !*stop.borrow_and_update() {
            if stop.changed().await.is_err() {
                // The server is gone without a signal: treat as a stop.
                break;
            }
        }
    });
    let outcome = std::future::poll_fn(|cx| {
        let entered = d.exec.enter();
        // The frames first: the stop signal's poll takes the shared
        // channel's lock, which a call's answer need not wait for.
        if let Poll::Ready(done) = d.poll(&mut inbound, cx) {
            return Poll::Ready(done);
        }
        let look = !d.life.closing()
            && (signal.has_changed().unwrap_or(true)
                || !registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())));
        if look {
            registered = Some(cx.waker().clone());
        }
        if look && stopped.as_mut().poll(cx).is_ready() {
            d.closing = CloseReason::Shutdown;
            d.begin_close("server shutting down");
            // Polled again at once: a connection with no calls open ends.
            cx.waker().wake_by_ref();
        }
        while let Some(at) = d.life.deadline() {
            let life = life_timer.get_or_insert_with(|| Alarm::new(at));
            if life.deadline() != at {
                life.reset(at);
            }
            if life.poll(cx).is_pending() {
                break;
            }
            match d.life.due(Instant::now()) {
                Due::Nothing => {}
                Due::Begin(why) => {
                    d.closing = CloseReason::MaxAge;
                    d.announce(why);
                }
                Due::Final(why) => d.go_away(Reason::NO_ERROR, why),
                Due::Force => return Poll::Ready(Ok(())),
            }
            if d.calls.is_going_away() && d.calls.is_empty() {
                return Poll::Ready(Ok(()));
            }
        }
        while timer.poll(cx).is_ready() {
            let now = Instant::now();
            match d.timers.check(now, d.calls.peer_settings.is_some()) {
                TimerEvent::Next(at) => timer.reset(at),
                TimerEvent::Ping(payload, at) => {
                    let ping = tram_wire::Ping {
                        ack: false,
                        payload,
                    };
                    let _ = d.out.force_send(Frame::Ping(ping));
                    timer.reset(at);
                }
                TimerEvent::Idle => {
                    tracing::debug!(peer = %addr, "closing idle connection");
                    if !d.life.closing() {
                        d.closing = CloseReason::Idle;
                        d.begin_close("idle");
                        cx.waker().wake_by_ref();
                    }
                    timer.reset(now + Duration::from_secs(3600));
                }
                TimerEvent::Expired(why) => {
                    return Poll::Ready(Err(ProtocolError::with_reason(Reason::TIMEOUT, why)));
                }
            }
        }
        if d.exec.leave(entered) {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    })
    .await;
    d.exec.clear();
    d.calls.close_all();
    if let Err(e) = outcome {
        d.closing = if e.reason == Reason::TIMEOUT {
            CloseReason::Timeout
        } else {
            CloseReason::ProtocolError
        };
        violation!(peer = %addr, reason = %e.reason, "closing connection: {}", e.message);
        if let Some(goaway) = d.calls.fail(&e) {
            let _ = d.out.force_send(goaway);
        }
    }
    d.report(inbound.bytes_received());
    d.observers.closed(
        Some(addr),
        d.closing,
        inbound.bytes_received(),
        d.out.bytes_written(),
    );
    Ok(())
}

struct Driver {
    calls: ServerCalls,
    out: Sender<RpcEncoder>,
    exec: Exec<CallId>,
    timers: Timers,
    spawn_handlers: bool,
    observers: Arc<Observers>,
    /// What the calls are, to the observers (`tram`, or a gateway's).
    system: &'static str,
    addr: SocketAddr,
    stats: Registered,
    /// Why the connection is closing, should it close now.
    closing: CloseReason,
    reported: Reported,
    /// The time, read once per poll when first needed: the calls the poll
    /// reads count their deadlines and observations from it (earlier than
    /// a later CALL's read by the handling of at most [`TURNS_PER_POLL`]
    /// turns before it, which only shortens a deadline).
    now: Option<Instant>,
    /// Its graceful close and maximum age.
    life: Life,
}

/// The connection's byte counts as last reported to the metrics.
#[derive(Default)]
struct Reported {
    received: u64,
    sent: u64,
    queued: usize,
}

/// The driver's side of the call table's effects.
struct Act<'a> {
    out: &'a Sender<RpcEncoder>,
    exec: &'a mut Exec<CallId>,
    spawn_handlers: bool,
    observers: &'a Arc<Observers>,
    system: &'static str,
    addr: SocketAddr,
    now: &'a mut Option<Instant>,
}

impl Act<'_> {
    /// When a call with `metadata` started, if it may be observed: the
    /// turn's time.
    fn started(&mut self, metadata: &Metadata) -> Option<Instant> {
        (self.observers.watching() || !metadata.is_empty()).then(|| self.clock())
    }

    /// The poll's time, read at its first use.
    fn clock(&mut self) -> Instant {
        *self.now.get_or_insert_with(Instant::now)
    }
}

impl Effects for Act<'_> {
    fn start(&mut self, route: &Route, a: Accepted) -> Option<usize> {
        let call = a.call;
        let started = self.started(&a.metadata);
        let observed = observe(
            self.observers,
            || route.observed(self.observers, self.system),
            Some(self.addr),
            &a.metadata,
            started,
        );
        if let (Some(o), Some(m)) = (&observed, &a.message) {
            o.request_message(|| m.len());
        }
        let mut incoming = IncomingCall {
            call,
            message: a.message,
            metadata: a.metadata,
            deadline: a.deadline,
            out: self.out.uncounted(),
            shared: a.shared,
            observed,
        };
        if let (Some(inline), false) = (&route.inline, self.spawn_handlers) {
            return inline(&mut incoming).and_then(|waiting| self.exec.spawn(waiting, call));
        }
        let mut fut = (route.handler)(incoming);
        if self.spawn_handlers {
            fut = spawned(fut);
        }
        self.exec.spawn(fut, call)
    }

    fn send(&mut self, frame: Frame) {
        let _ = self.out.force_send(frame);
    }

    fn cancel(&mut self, task: usize) {
        self.exec.cancel(task);
    }

    fn now(&mut self) -> Instant {
        self.clock()
    }

    fn rejected(&mut self, route: Option<&Route>, metadata: Option<&Metadata>, code: Code) {
        let empty = Metadata::new();
        let metadata = metadata.unwrap_or(&empty);
        let started = self.started(metadata);
        let (observers, system) = (self.observers, self.system);
        let method = || match route {
            Some(r) => r.observed(observers, system),
            None => observers.other(),
        };
        let observed = observe(observers, method, Some(self.addr), metadata, started);
        Observed::finish(observed, code);
    }
}

impl Driver {
    fn poll(
        &mut self,
        inbound: &mut Inbound<BoxRead, RunDecoder>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ProtocolError>> {
        if self.observers.counts_bytes() {
            // Before this turn queues anything: what is still queued from
            // the last is what the socket has not taken.
            self.report(inbound.bytes_received());
        }
        self.now = None;
        let mut more_frames = true;
        let mut got = false;
        for _ in 0..TURNS_PER_POLL {
            match self.turn(inbound, cx)? {
                Turn::Ended => return Poll::Ready(Ok(())),
                Turn::Drained { got: g } => {
                    got |= g;
                    more_frames = false;
                    break;
                }
                Turn::Bounded | Turn::Paused => got = true,
            }
        }
        if self.calls.is_going_away() && self.calls.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if got || self.timers.is_idle() != self.calls.is_empty() {
            let now = self.now.unwrap_or_else(Instant::now);
            if got {
                self.timers.received(now);
            }
            self.timers.busy(!self.calls.is_empty(), now);
        }
        self.stats.stats.publish(
            self.calls.len(),
            self.calls.started(),
            inbound.bytes_received(),
            self.calls.is_going_away(),
        );
        if more_frames {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }

    /// One turn: frames up to the turn's bounds, then the handlers, with
    /// the outbound queue corked (the turn's answers go out in one write as
    /// it ends). Stopping at a bound leaves frames unread and no wake-up
    /// registered with the socket: the caller takes another turn, or wakes
    /// the driver.
    fn turn(
        &mut self,
        inbound: &mut Inbound<BoxRead, RunDecoder>,
        cx: &mut Context<'_>,
    ) -> Result<Turn, ProtocolError> {
        self.out.hold();
        let turn = self.corked_turn(inbound, cx);
        self.out.release();
        turn
    }

    /// [`Driver::turn`]'s work, with the queue held back.
    fn corked_turn(
        &mut self,
        inbound: &mut Inbound<BoxRead, RunDecoder>,
        cx: &mut Context<'_>,
    ) -> Result<Turn, ProtocolError> {
        let mut turn = Turn::Bounded;
        let turn_starts = inbound.bytes_decoded();
        let (mut frames, mut limit, mut turn_ends) = (0, turn::TURN_FRAMES, u64::MAX);
        while frames < limit {
            // Once the few frames a short read brought in are all handled,
            // the turn ends without asking the socket again: their answers
            // are written first, and the next turn registers for more. At
            // one call in flight that takes the wake-up's registration off
            // the path from the call's read to its answer's write. A loaded
            // connection's turn reads on: a turn of its own for what
            // arrived meanwhile would cost a write more.
            if (1..FEW_FRAMES).contains(&frames)
                && inbound.buffered() == 0
                && inbound.read_was_short()
            {
                turn = Turn::Paused;
                break;
            }
            match inbound.poll_recv(cx) {
                Poll::Ready(Some(Ok(received))) => {
                    if frames == 0 {
                        let first = inbound.bytes_decoded() - turn_starts;
                        let bytes;
                        (limit, bytes) = turn::bounds(first, inbound.buffered() as u64);
                        turn_ends = turn_starts + bytes;
                    }
                    frames += 1;
                    self.received(received)?;
                    if inbound.bytes_decoded() >= turn_ends {
                        break;
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    if e.kind() == conn::ErrorKind::Io || e.kind() == conn::ErrorKind::Truncated {
                        self.closing = CloseReason::Io;
                        return Ok(Turn::Ended);
                    }
                    let reason = match e.downcast_ref::<tram_wire::Error>() {
                        Some(w) => w.reason(),
                        None => Reason::PROTOCOL_ERROR,
                    };
                    return Err(ProtocolError::with_reason(reason, e.to_string()));
                }
                // The client closed: nothing more can be answered usefully.
                Poll::Ready(None) => return Ok(Turn::Ended),
                Poll::Pending => {
                    turn = Turn::Drained { got: frames > 0 };
                    break;
                }
            }
        }
        let calls = &mut self.calls;
        self.exec.poll_ready(cx, |call| calls.finished(call));
        Ok(turn)
    }

    /// Reports the bytes moved and queued since the last report.
    fn report(&mut self, received: u64) {
        let sent = self.out.bytes_written();
        let queued = self.out.queued_bytes();
        let r = &mut self.reported;
        self.observers
            .transferred(received - r.received, sent - r.sent);
        self.observers.queued(queued as i64 - r.queued as i64);
        *r = Reported {
            received,
            sent,
            queued,
        };
    }

    /// Begins a graceful close (see `lifecycle`), unless one has begun.
    fn begin_close(&mut self, why: &'static str) {
        if self.life.begin(why, Instant::now()) {
            self.announce(why);
        }
    }

    /// The first GOAWAY and its PING.
    fn announce(&mut self, why: &'static str) {
        if let Some(goaway) = self.calls.announce(why) {
            let _ = self.out.force_send(goaway);
            let ping = tram_wire::Ping {
                ack: false,
                payload: DRAIN_PING,
            };
            let _ = self.out.force_send(Frame::Ping(ping));
        }
    }

    fn go_away(&mut self, reason: Reason, message: &str) {
        if let Some(goaway) = self.calls.go_away(reason, message) {
            let _ = self.out.force_send(goaway);
        }
    }

    fn received(&mut self, received: Received) -> Result<(), ProtocolError> {
        let settled = self.calls.peer_settings.is_some();
        match received {
            Received::Run(run) if settled => self.calls.run(run),
            Received::Run(_) => Err(protocol::not_settings()),
            // Calls and their messages, the bulk of the traffic, go
            // straight to the call table.
            Received::Frame(frame) if settled && !protocol::is_control(&frame) => {
                self.for_calls(frame)
            }
            Received::Frame(frame) => match protocol::control(settled, frame, &self.out)? {
                Control::Settled(s) => {
                    self.calls.peer_settings = Some(s);
                    Ok(())
                }
                Control::Handled => Ok(()),
                Control::Pong(DRAIN_PING) => {
                    if let Some(why) = self.life.pong(Instant::now()) {
                        self.go_away(Reason::NO_ERROR, why);
                    }
                    Ok(())
                }
                Control::Pong(_) => Ok(()),
                Control::Other(frame) => self.for_calls(frame),
            },
        }
    }

    /// A frame for the call table, which acts through the driver.
    fn for_calls(&mut self, frame: Frame) -> Result<(), ProtocolError> {
        let mut act = Act {
            out: &self.out,
            exec: &mut self.exec,
            spawn_handlers: self.spawn_handlers,
            observers: &self.observers,
            system: self.system,
            addr: self.addr,
            now: &mut self.now,
        };
        self.calls.frame(frame, &mut act)
    }
}

/// How a driver's turn ended.
enum Turn {
    /// At a bound, with frames maybe left to read.
    Bounded,
    /// What a short read brought in is handled; the socket was not asked
    /// for more (nor a wake-up registered): the caller takes another turn.
    Paused,
    /// The socket had nothing more; `got`: frames were handled first.
    Drained { got: bool },
    /// The connection is over (the client closed, or a read failed).
    Ended,
}

/// Runs `fut` as a task of its own; the returned future waits for it, and
/// dropping it (a cancelled call) aborts the task.
fn spawned(fut: BoxFuture) -> BoxFuture {
    let task = AbortOnDrop(tokio::spawn(fut));
    Box::pin(async move {
        let _ = task.await;
    })
}

/// A spawned task, aborted when this handle is dropped (a spawned handler
/// whose call is cancelled; a connection on a core when the server stops).
pub(super) struct AbortOnDrop(pub(super) tokio::task::JoinHandle<()>);

impl Future for AbortOnDrop {
    type Output = Result<(), tokio::task::JoinError>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
