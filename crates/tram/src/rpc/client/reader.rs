//! Opening a client connection and its reader task: the handshake (the
//! connection is ready once the server's SETTINGS are in), then the
//! server's frames routed to their calls a run at a time, and keepalive.

use std::io;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tram_wire::Frame;

use super::super::Status;
use super::super::alarm::Alarm;
use super::super::codec::{Received, RunDecoder};
use super::super::protocol::{self, Control, ProtocolError};
use super::super::timers::{Keepalive, TimerEvent, Timers};
use super::super::transport::{self, BoxRead};
use super::builder::ChannelConfig;
use super::calls::Effects;
use super::conn::ClientConn;
use crate::balance::endpoint::Stats;
use crate::conn::{self, Inbound};
use crate::observe::{CloseReason, Observers, limit};

/// Frames (or runs of one stream's plain messages, each counted once)
/// decoded ahead of taking the call table's lock, at most. As long as a
/// loaded connection's read usually is, so that one read's callers are
/// woken together (see `calls::relay`): a read split into runs would wake each
/// run's callers apart, each run's pushing the one before's out of the
/// worker's LIFO slot. Bounded so that the lock (the outbound queue's
/// too) is held for some microseconds at most while callers wait to open
/// calls and the writer to take its next batch.
const READ_RUN: usize = 256;

/// How long the callers on a relay may go unwoken (see `calls::relay`): the bound
/// on how long a caller that was woken and did not poll its call can hold
/// up the others. A relay that moves wakes a caller every microsecond or
/// so.
const RELAY_FLUSH: Duration = Duration::from_millis(1);

/// Opens one connection: transport, handshake, reader task. Returns once
/// the server's SETTINGS have arrived.
pub(crate) async fn connect(
    config: &ChannelConfig,
    target: &str,
    publish_load: bool,
    stats: Option<Arc<Stats>>,
) -> io::Result<Arc<ClientConn>> {
    let mut peer = None;
    let halves = match &config.connector {
        Some(connect) => connect().await?,
        None => {
            let stream = conn::connect(target, &config.tcp).await?;
            peer = stream.peer_addr().ok();
            transport::client(stream, target, config.tls.as_ref()).await?
        }
    };
    let (mut inbound, out) =
        transport::open(halves, config.settings, config.conn).map_err(io::Error::other)?;
    let conn = Arc::new(ClientConn::new(
        out,
        config.settings.initial_credit,
        publish_load,
        config.wait_for_capacity,
        config.interceptor.clone(),
        peer,
        stats,
    ));
    // The connection is ready once the server's SETTINGS are in: until
    // then its limits (the largest frame above all) are unknown, and a
    // large first message would be refused.
    let (settled_tx, settled) = oneshot::channel::<Result<(), Status>>();
    let reader = conn.clone();
    let keepalive = config.keepalive;
    let observers = config.observers.clone();
    tokio::spawn(async move {
        let mut settled_tx = Some(settled_tx);
        let (why, reason) = read_loop(
            &reader,
            &mut inbound,
            keepalive,
            &mut settled_tx,
            &observers,
        )
        .await;
        if settled_tx.is_none() {
            // It had opened (the handshake finished).
            observers.closed(
                peer,
                reason,
                inbound.bytes_received(),
                reader.out.bytes_written(),
            );
        }
        if let Some(tx) = settled_tx {
            // Failed before the handshake finished: say why.
            let _ = tx.send(Err(why.clone()));
        }
        reader.fail_all(&why);
        // Nothing more is read, so nothing more is sent: the GOAWAY
        // (if any) goes out, then the connection closes, rather than
        // lingering open until the pool replaces it.
        reader.out.close();
    });
    match settled.await {
        Ok(Ok(())) => {
            config.observers.opened(peer);
            Ok(conn)
        }
        Ok(Err(why)) => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            why.message().to_owned(),
        )),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "closed before the server's SETTINGS arrived",
        )),
    }
}

/// Reads until the connection ends; the status its calls fail with.
async fn read_loop(
    conn: &ClientConn,
    inbound: &mut Inbound<BoxRead, RunDecoder>,
    keepalive: Option<Keepalive>,
    settled_tx: &mut Option<oneshot::Sender<Result<(), Status>>>,
    observers: &Observers,
) -> (Status, CloseReason) {
    // The bytes moved as last reported to the metrics.
    let (mut reported_in, mut reported_out) = (0, 0);
    let mut settled = false;
    let mut fx = Effects::default();
    let mut batch = Vec::new();
    // Bytes read up to the read being handled.
    let mut handled = 0;
    // Keepalive: the timer is only looked at when it fires; frames just
    // move the last receive time (a clock read per read, no timer reset).
    let mut timers = Timers::new(Instant::now(), None, None, keepalive);
    let first = keepalive.map_or(Duration::from_secs(3600), |k| k.interval);
    let mut timer = Alarm::new(Instant::now() + first);
    // Armed while a relay may be waiting; polled first, so that frames
    // read without pause do not keep it from firing.
    let mut flush = pin!(tokio::time::sleep(RELAY_FLUSH));
    let mut flush_armed = false;
    // Only a multi-threaded runtime has the LIFO slot a relay runs through:
    // on a current-thread one, each caller woken would queue behind every
    // task runnable, and a read's callers take turns with the whole queue.
    let relay = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    let mut first_poll = true;
    loop {
        let received = tokio::select! {
            biased;
            () = &mut flush, if flush_armed => {
                flush_armed = false;
                conn.relay.flush(&mut fx);
                fx.wake.drain(..).for_each(std::task::Waker::wake);
                continue;
            }
            () = std::future::poll_fn(|cx| {
                conn.deadlines.poll(std::mem::take(&mut first_poll), cx)
            }) => {
                conn.expire_deadlines();
                continue;
            }
            f = inbound.recv() => f,
            () = std::future::poll_fn(|cx| timer.poll(cx)), if keepalive.is_some() => {
                match timers.check(Instant::now(), true) {
                    TimerEvent::Next(at) => timer.reset(at),
                    TimerEvent::Ping(payload, at) => {
                        let ping = tram_wire::Ping { ack: false, payload };
                        let _ = conn.out.force_send(Frame::Ping(ping));
                        timer.reset(at);
                    }
                    TimerEvent::Expired(_) | TimerEvent::Idle => {
                        let why = Status::unavailable("keepalive ping unanswered: server unreachable");
                        return (why, CloseReason::Timeout);
                    }
                }
                continue;
            }
        };
        if keepalive.is_some() || conn.timed() {
            let now = Instant::now();
            timers.received(now);
            // Calls that end in this read are timed to it.
            fx.now = conn.timed().then(|| crate::balance::endpoint::nanos(now));
        }
        let first = match received {
            Some(Ok(f)) => f,
            Some(Err(e)) if e.kind() == conn::ErrorKind::Decode => {
                return violation(
                    conn,
                    ProtocolError::new(format!("bad frame from server: {e}")),
                );
            }
            Some(Err(e)) => {
                let why = Status::unavailable(format!("connection lost: {e}"));
                return (why, CloseReason::Io);
            }
            None => {
                let why = Status::unavailable("connection closed by the server");
                return (why, CloseReason::Normal);
            }
        };
        if !settled {
            let settings = match first {
                Received::Frame(f) => protocol::control(false, f, &conn.out),
                Received::Run(_) => Err(protocol::not_settings()),
            };
            match settings {
                Ok(Control::Settled(s)) => {
                    conn.calls().settled(s);
                    conn.capacity.notify_waiters();
                    settled = true;
                    if let Some(tx) = settled_tx.take() {
                        let _ = tx.send(Ok(()));
                    }
                }
                Ok(_) => return violation(conn, protocol::not_settings()),
                Err(e) => return violation(conn, e),
            }
            continue;
        }
        // The frames this read brought in are decoded a run at a time
        // (at most `READ_RUN`, which bounds the run's buffer), then
        // handled under one short lock: decoding under it would hold
        // off the callers on other threads for the whole run.
        let mut failed = None;
        batch.push(first);
        while !batch.is_empty() {
            while failed.is_none() && batch.len() < READ_RUN {
                match inbound.try_recv() {
                    Some(Ok(f)) => batch.push(f),
                    // Reported once the frames before it are handled.
                    Some(Err(e)) => failed = Some(e),
                    None => break,
                }
            }
            let full = batch.len() == READ_RUN;
            let mut broken = None;
            let relaying = {
                let mut calls = conn.calls();
                for received in batch.drain(..) {
                    let handled = match received {
                        Received::Frame(f) if !protocol::is_control(&f) => {
                            if matches!(f, Frame::GoAway(_)) {
                                calls.out().encoder_mut().stop_calls();
                            }
                            calls.frame(f, &mut fx)
                        }
                        Received::Frame(f) => match protocol::control(true, f, calls.out()) {
                            Ok(Control::Other(f)) => calls.frame(f, &mut fx),
                            Ok(_) => Ok(()),
                            Err(e) => Err(e),
                        },
                        Received::Run(run) => calls.run(run),
                    };
                    if let Err(e) = handled {
                        broken = Some(e);
                        break;
                    }
                }
                calls.answered(fx.wake.len());
                let read = (inbound.bytes_received() - handled) as usize;
                let relaying = relay && conn.relay.queue(&mut fx, read);
                conn.apply(calls, &mut fx);
                relaying
            };
            if let Some(e) = broken {
                return violation(conn, e);
            }
            if relaying && !flush_armed {
                flush.as_mut().reset(Instant::now() + RELAY_FLUSH);
                flush_armed = true;
            }
            if full && failed.is_none() {
                // More may be buffered: start the next run with it.
                match inbound.try_recv() {
                    Some(Ok(f)) => batch.push(f),
                    Some(Err(e)) => failed = Some(e),
                    None => {}
                }
            }
        }
        handled = inbound.bytes_received();
        conn.received.store(handled, Ordering::Relaxed);
        if observers.counts_bytes() {
            let (now_received, now_sent) = (inbound.bytes_received(), conn.out.bytes_written());
            observers.transferred(now_received - reported_in, now_sent - reported_out);
            (reported_in, reported_out) = (now_received, now_sent);
        }
        if let Some(e) = failed {
            return violation(
                conn,
                ProtocolError::new(format!("bad frame from server: {e}")),
            );
        }
    }
}

/// Closes the connection for the server's protocol error: GOAWAY, and the
/// status the calls fail with.
fn violation(conn: &ClientConn, e: ProtocolError) -> (Status, CloseReason) {
    limit::violation!(peer = ?conn.peer, "closing connection: {}", e.message);
    e.go_away(&conn.out, 0);
    let why = Status::internal(format!("protocol error: {}", e.message));
    (why, CloseReason::ProtocolError)
}
