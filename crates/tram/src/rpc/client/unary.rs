//! Unary calls: [`UnaryCall`], whose common case (a connected channel with
//! room) registers and queues the call on its first poll and completes on
//! the next, taking its answer from a slot in the future itself without
//! the connection's lock; the general path (connecting, waiting for
//! capacity or queue room, retries), boxed; and batches of calls from one
//! task.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tram_wire::{Code, Metadata};

use super::super::unary::{self as answer};
use super::super::{Request, Response, Status, deadline};
use super::Channel;
use super::calls::AnswerSlot;
use super::conn::{CallHandle, NotOpened};
use crate::observe::{Observed, TRAM, TraceContext};

/// The future of [`Channel::unary`].
///
/// Written by hand rather than as an `async fn`, so that the common case
/// (a connected channel with room) is one small state: the call is
/// registered and queued on the first poll and completed on the next, with
/// no nested futures to build and move. Everything else runs on the
/// general path, boxed.
///
/// The future holds the slot its answer is handed over in, registered by
/// address: it is not `Unpin` (`.await` pins it; to poll it by hand, pin
/// it with `std::pin::pin!` or `Box::pin`).
#[must_use = "futures do nothing unless polled"]
pub struct UnaryCall<'a, Req, Resp> {
    channel: &'a Channel,
    path: &'a str,
    state: UnaryState<'a, Req, Resp>,
    /// Where the connection's reader leaves the answer on the fast path.
    slot: AnswerSlot,
}

type BoxedCall<'a, Resp> =
    Pin<Box<dyn Future<Output = Result<Response<Resp>, Status>> + Send + 'a>>;

enum UnaryState<'a, Req, Resp> {
    /// Not polled yet.
    Start(Request<Req>),
    /// Sent: waiting for the response, and for the deadline if any.
    Waiting {
        call: CallHandle,
        /// The call's deadline: its connection's timer wakes the caller
        /// once it passes (`deadlines.rs`).
        deadline: Option<std::time::Instant>,
        /// Just sent: the waker is registered with the call already.
        first: bool,
        /// The call as observed, when anything watches (kept in the
        /// states after the first poll, where it costs the future no
        /// size).
        observed: Option<Box<Observed>>,
    },
    /// The general path.
    Slow(BoxedCall<'a, Resp>, Option<Box<Observed>>),
    Done,
}

impl<Req, Resp> Drop for UnaryCall<'_, Req, Resp> {
    fn drop(&mut self) {
        if let UnaryState::Waiting { .. } = self.state {
            let UnaryState::Waiting { call, .. } =
                std::mem::replace(&mut self.state, UnaryState::Done)
            else {
                unreachable!("matched Waiting above")
            };
            // Detaches the slot before it goes, unless the answer is in.
            call.let_go(&self.slot);
        }
    }
}

impl<'a, Req, Resp> UnaryCall<'a, Req, Resp>
where
    Req: prost::Message + 'a,
    Resp: prost::Message + Default + 'a,
{
    pub(super) fn new(channel: &'a Channel, path: &'a str, request: Request<Req>) -> Self {
        UnaryCall {
            channel,
            path,
            state: UnaryState::Start(request),
            slot: AnswerSlot::default(),
        }
    }
}

impl<'a, Req, Resp> Future for UnaryCall<'a, Req, Resp>
where
    Req: prost::Message + 'a,
    Resp: prost::Message + Default + 'a,
{
    type Output = Result<Response<Resp>, Status>;

    #[allow(unsafe_code)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `slot` is never moved out of (nor replaced); everything
        // else is only ever moved, and the futures are boxed.
        let this = unsafe { self.get_unchecked_mut() };
        loop {
            match &mut this.state {
                UnaryState::Start(_) => {
                    let UnaryState::Start(request) =
                        std::mem::replace(&mut this.state, UnaryState::Done)
                    else {
                        unreachable!("matched Start above")
                    };
                    // SAFETY: pinned, and `Drop` lets go of a registered
                    // slot before it goes.
                    this.state = unsafe { start(this.channel, this.path, request, &this.slot, cx) };
                }
                UnaryState::Waiting {
                    call,
                    deadline,
                    first,
                    observed,
                } => {
                    // Just sent, the call has no answer yet, and its
                    // deadline is the connection's timer's to ring (at
                    // once if it has passed already), so the clock is not
                    // read for it.
                    if std::mem::take(first) {
                        return Poll::Pending;
                    }
                    // Woken for its answer, the caller finds it in the slot
                    // without the lock; the lock is taken only to look
                    // again and register the waker.
                    if this.slot.is_ready() || call.conn.poll_slot(call.id, &this.slot, cx) {
                        let outcome = this.slot.take().unwrap_or_else(|| {
                            Err(Status::internal("call answered without its answer"))
                        });
                        call.completed();
                        call.conn.pass_on();
                        let outcome = answer::decode(outcome);
                        ended(observed.take(), &outcome);
                        this.state = UnaryState::Done;
                        return Poll::Ready(outcome);
                    }
                    if let Some(at) = *deadline {
                        if std::time::Instant::now() >= at {
                            let outcome = Err(deadline::exceeded());
                            ended(observed.take(), &outcome);
                            // Cancels the call.
                            if let UnaryState::Waiting { call, .. } =
                                std::mem::replace(&mut this.state, UnaryState::Done)
                            {
                                call.let_go(&this.slot);
                            }
                            return Poll::Ready(outcome);
                        }
                    }
                    return Poll::Pending;
                }
                UnaryState::Slow(fut, observed) => {
                    let outcome = std::task::ready!(fut.as_mut().poll(cx));
                    ended(observed.take(), &outcome);
                    this.state = UnaryState::Done;
                    return Poll::Ready(outcome);
                }
                UnaryState::Done => panic!("UnaryCall polled after completion"),
            }
        }
    }
}

impl<Req, Resp> std::fmt::Debug for UnaryCall<'_, Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnaryCall")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// An observed call's end, with its response's size.
#[inline]
fn ended<Resp: prost::Message>(
    observed: Option<Box<Observed>>,
    outcome: &Result<Response<Resp>, Status>,
) {
    if let Some(mut o) = observed {
        ended_observed(&mut o, outcome);
    }
}

fn ended_observed<Resp: prost::Message>(
    o: &mut Observed,
    outcome: &Result<Response<Resp>, Status>,
) {
    {
        match outcome {
            Ok(resp) => {
                o.response_message(|| resp.get_ref().encoded_len());
                o.end(Code::Ok);
            }
            Err(status) => o.end(status.code()),
        }
    }
}

/// The call's request with the current trace context (if any), and its
/// observation (if anything watches).
fn observe_request<Req: prost::Message>(
    channel: &Channel,
    path: &str,
    mut request: Request<Req>,
) -> (Request<Req>, Option<Box<Observed>>) {
    let observers = &channel.pool.config.observers;
    let observed = observers.watching().then(|| {
        let method = observers.method(TRAM, path);
        let o = Observed::start(observers, method, None, request.metadata(), Instant::now());
        o.request_message(|| request.get_ref().encoded_len());
        o
    });
    #[cfg(feature = "opentelemetry")]
    if let Some(t) = observed.as_deref().and_then(Observed::otel_trace) {
        let metadata = t.inject_as_parent(request.metadata().clone());
        return (request.with_metadata(metadata), observed);
    }
    if let Some(ctx) = TraceContext::current() {
        let metadata = ctx.inject(request.metadata().clone());
        request = request.with_metadata(metadata);
    }
    (request, observed)
}

/// The first poll of a unary call: on a connected channel with room,
/// registers the call (with the caller's waker and `slot`) and queues its
/// CALL frame without awaiting anything. Anything else goes to the general
/// path.
///
/// # Safety
///
/// As [`ConnRef::try_open_unary`](super::ConnRef::try_open_unary) for
/// `slot`, when the state returned is `Waiting`.
#[allow(unsafe_code)]
unsafe fn start<'a, Req, Resp>(
    channel: &'a Channel,
    path: &'a str,
    request: Request<Req>,
    slot: &AnswerSlot,
    cx: &mut Context<'_>,
) -> UnaryState<'a, Req, Resp>
where
    Req: prost::Message + 'a,
    Resp: prost::Message + Default + 'a,
{
    let (request, observed) = observe_request(channel, path, request);
    let pool = &channel.pool;
    let retry = request.is_idempotent() && pool.config.retries > 0;
    let (conn, picked) = match pool.ready_connection() {
        Some(ready) if !retry => ready,
        _ => return UnaryState::Slow(Box::pin(slow(channel, path, request)), observed),
    };
    let (msg, metadata, timeout) = request.into_parts();
    // The deadline runs from here, before anything is sent.
    let limit = timeout.map(|t| (t, std::time::Instant::now() + t));
    let deadline = limit.map(|(_, at)| at);
    // SAFETY: as this function's caller promises.
    match unsafe { conn.try_open_unary(path, &msg, metadata, limit, cx.waker(), slot, picked) } {
        Ok(call) => UnaryState::Waiting {
            call,
            deadline,
            first: true,
            observed,
        },
        Err(NotOpened::Failed(status)) => {
            UnaryState::Slow(Box::pin(async move { Err(status) }), observed)
        }
        Err(NotOpened::Later(metadata)) => {
            let attempt = attempts(channel, path, msg, metadata, timeout, false, true);
            UnaryState::Slow(Box::pin(attempt), observed)
        }
    }
}

/// A unary call on the general path.
async fn slow<Req, Resp>(
    channel: &Channel,
    path: &str,
    request: Request<Req>,
) -> Result<Response<Resp>, Status>
where
    Req: prost::Message,
    Resp: prost::Message + Default,
{
    let idempotent = request.is_idempotent();
    let (msg, metadata, timeout) = request.into_parts();
    attempts(channel, path, msg, metadata, timeout, idempotent, false).await
}

/// Calls made again, at once, when an attempt certainly did not reach a
/// server (each attempt picks its connection anew), at most.
const UNPROCESSED_RETRIES: u32 = 3;

/// The attempts of a call within its deadline: waiting for a connection
/// and for room; made again on another connection when an attempt did not
/// reach a server; made again after a backoff when idempotent and
/// configured to. `intercepted`: the metadata has been through the client
/// interceptor already.
async fn attempts<Req, Resp>(
    channel: &Channel,
    path: &str,
    msg: Req,
    metadata: Metadata,
    timeout: Option<Duration>,
    idempotent: bool,
    intercepted: bool,
) -> Result<Response<Resp>, Status>
where
    Req: prost::Message,
    Resp: prost::Message + Default,
{
    let at = deadline::after(timeout);
    let cfg = &channel.pool.config;
    let (mut retried, mut unprocessed) = (0, 0);
    // The first failure of an attempt that never reached a server: it says
    // why (a later one may only say the endpoint is backing off).
    let mut first_unprocessed: Option<Status> = None;
    loop {
        let left = deadline::left(at);
        let attempt = once(channel, path, &msg, metadata.clone(), left, intercepted);
        match deadline::within(at, attempt).await {
            Err(s) if s.is_unprocessed() && unprocessed < UNPROCESSED_RETRIES => {
                unprocessed += 1;
                first_unprocessed.get_or_insert(s);
            }
            Err(s)
                if idempotent
                    && retried < cfg.retries
                    && s.code() == Code::Unavailable
                    && !s.is_remote() =>
            {
                // Wait out the reconnection backoff (with its jitter).
                let delay = cfg
                    .backoff_base
                    .saturating_mul(1 << retried.min(16))
                    .min(cfg.backoff_max)
                    .mul_f64(1.25);
                retried += 1;
                if at.is_some_and(|d| Instant::now() + delay >= d) {
                    return Err(Status::deadline_exceeded(format!(
                        "deadline exceeded after {retried} attempts: {s}"
                    )));
                }
                tokio::time::sleep(delay).await;
            }
            Err(s) if s.is_unprocessed() => return Err(first_unprocessed.unwrap_or(s)),
            other => return other,
        }
    }
}

/// One attempt; `intercepted`: the metadata has been through the client
/// interceptor already.
async fn once<Req, Resp>(
    channel: &Channel,
    path: &str,
    msg: &Req,
    metadata: Metadata,
    timeout: Option<Duration>,
    intercepted: bool,
) -> Result<Response<Resp>, Status>
where
    Req: prost::Message,
    Resp: prost::Message + Default,
{
    let conn = channel.pool.connection().await?;
    let metadata = if intercepted {
        metadata
    } else {
        conn.intercept(path, metadata)?
    };
    let mut call = conn
        .open(path, Some(msg), metadata, timeout, true, None)
        .await?;
    let outcome = std::future::poll_fn(|cx| conn.poll_unary(call.id, cx)).await;
    call.completed();
    answer::decode(outcome)
}

impl Channel {
    /// Many unary calls from one task, without a task per call: every
    /// request is sent as its own call, all in one write, and the results
    /// come back in request order once all have completed.
    ///
    /// Each request's timeout travels to the server, which ends that call
    /// with `DEADLINE_EXCEEDED`; for a local limit on the whole batch, wrap
    /// this future in `tokio::time::timeout`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels every call of the batch still open.
    pub async fn unary_batch<Req, Resp, I>(
        &self,
        path: &str,
        requests: I,
    ) -> Vec<Result<Response<Resp>, Status>>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
        I: IntoIterator<Item = Request<Req>>,
    {
        let conn = match self.pool.connection().await {
            Ok(c) => c,
            Err(s) => return requests.into_iter().map(|_| Err(s.clone())).collect(),
        };
        let mut calls = Vec::new();
        let mut observed = Vec::new();
        {
            // Queue every CALL, then write them together.
            let _cork = conn.out.cork();
            for request in requests {
                let (msg, metadata, timeout) = request.into_parts();
                let (metadata, o) = self.observe_call(path, metadata);
                if let Some(o) = &o {
                    o.request_message(|| msg.encoded_len());
                }
                observed.push(o);
                let opened = match conn.intercept(path, metadata) {
                    Ok(metadata) => {
                        conn.open(path, Some(&msg), metadata, timeout, true, None)
                            .await
                    }
                    Err(s) => Err(s),
                };
                calls.push(opened);
            }
        }
        let mut results: Vec<Option<Result<Response<Resp>, Status>>> = calls
            .iter_mut()
            .map(|c| c.as_mut().err().map(|s| Err(s.clone())))
            .collect();
        std::future::poll_fn(|cx| {
            let mut pending = false;
            for (call, slot) in calls.iter_mut().zip(results.iter_mut()) {
                let (Ok(call), None) = (call, &slot) else {
                    continue;
                };
                match conn.poll_unary(call.id, cx) {
                    Poll::Pending => pending = true,
                    Poll::Ready(outcome) => {
                        call.completed();
                        *slot = Some(answer::decode(outcome));
                    }
                }
            }
            if pending {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        })
        .await;
        results
            .into_iter()
            .zip(observed)
            .map(|(r, o)| {
                let r = r.unwrap_or_else(|| Err(Status::internal("call result missing")));
                ended(o, &r);
                r
            })
            .collect()
    }
}
