//! The client: [`Channel`], its connections, and calls.
//!
//! A connection's calls live in a slab whose keys are the call ids, so ids
//! are reused lowest-first as PROTOCOL.md asks. A unary call keeps its
//! state inline in the slab (no allocation per call); streaming calls share
//! a `CallShared` with their handles. One reader task per connection routes
//! frames to calls; sending happens on the caller's task, through the
//! connection's outbound queue.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use slab::Slab;
use tokio::sync::Notify;
use tokio::time::Instant;
use tram_wire::{Call, CallId, Cancel, Code, End, Frame, Metadata, Settings};

use super::codec::{Hello, Open, Received, RpcEncoder, RunDecoder};
use super::stream::{CallShared, Streaming, send_message};
use super::{Request, Response, Status};
use crate::conn::{self, Connection, Sender, TcpConfig};

/// How a [`Channel`] connects and behaves.
#[derive(Debug, Clone)]
pub struct ChannelConfig {
    /// Connections to open and spread calls over, least loaded first
    /// (default 1).
    pub pool_size: usize,
    /// Limit for one connection attempt, name resolution included
    /// (default 5 s).
    pub connect_timeout: Duration,
    /// Delay after the first failed attempt; doubles per failure, with
    /// ±20% jitter (default 100 ms).
    pub backoff_base: Duration,
    /// Largest delay between attempts (default 10 s).
    pub backoff_max: Duration,
    /// Extra attempts for calls marked [`Request::idempotent`] that fail
    /// with a local `UNAVAILABLE` (default 0: no retries). Attempts are
    /// spaced like reconnections and share the call's one deadline.
    pub retries: u32,
    /// When a connection is at the server's `max_concurrent_calls`: wait
    /// for a slot (`true`, default) or fail with `RESOURCE_EXHAUSTED`.
    pub wait_for_capacity: bool,
    /// Keepalive pings on each connection (default: after 30 s without a
    /// frame from the server, answered within 10 s). A connection whose
    /// server stops answering fails its calls with `UNAVAILABLE` and is
    /// replaced. `None`: off.
    pub keepalive: Option<super::Keepalive>,
    /// Runs as each call opens, to add metadata to it (a bearer token, a
    /// trace id) or refuse it locally (default none).
    pub interceptor: Option<super::ClientInterceptor>,
    /// TLS for every connection (feature `tls`; default none: plain TCP).
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::ClientTls>,
    /// Limits this client announces (its receive side).
    pub settings: Settings,
    /// Socket options.
    pub tcp: TcpConfig,
    /// Message-stream options (buffer sizes, outbound bound, inline
    /// writes). With [`conn::Config::inline_writes`] on (the default), a
    /// caller alone on its connection writes its call itself: the lowest
    /// latency for one call at a time. Calls made while others are in
    /// flight are always queued for the connection's writer task, which
    /// sends everything the callers runnable at that moment queued in one
    /// write.
    pub conn: conn::Config,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            pool_size: 1,
            connect_timeout: Duration::from_secs(5),
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            retries: 0,
            wait_for_capacity: true,
            keepalive: Some(super::Keepalive::default()),
            interceptor: None,
            #[cfg(feature = "tls")]
            tls: None,
            settings: Settings::DEFAULT,
            tcp: TcpConfig::default(),
            conn: conn::Config::default(),
        }
    }
}

/// A client for one server address: cheap to clone, shared by any number of
/// tasks. Connects on the first call, reconnects after a failure (with
/// exponential backoff and jitter; calls made while waiting to retry fail at
/// once with `UNAVAILABLE`), and fails every call in flight with
/// `UNAVAILABLE` when its connection is lost. Calls are never retried.
#[derive(Clone)]
pub struct Channel {
    inner: Arc<Inner>,
}

struct Inner {
    target: String,
    config: ChannelConfig,
    slots: Vec<Slot>,
    /// Opens connections other than by TCP to `target`.
    connector: Option<Connector>,
}

/// Opens one transport for a channel's connection (see
/// [`Channel::with_connector`]).
type Connector = Arc<
    dyn Fn() -> std::pin::Pin<
            Box<dyn Future<Output = std::io::Result<(super::BoxRead, super::BoxWrite)>> + Send>,
        > + Send
        + Sync,
>;

struct Slot {
    conn: RwLock<Option<Arc<ClientConn>>>,
    connecting: tokio::sync::Mutex<Backoff>,
}

#[derive(Default)]
struct Backoff {
    failures: u32,
    next_attempt: Option<Instant>,
    seed: u64,
}

impl Backoff {
    fn failed(&mut self, base: Duration, max: Duration) {
        let exp = base.saturating_mul(1u32 << self.failures.min(20));
        let delay = exp.min(max);
        // xorshift: jitter needs spread, not cryptographic quality.
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let factor = 0.8 + (self.seed % 1000) as f64 / 2500.0;
        self.next_attempt = Some(Instant::now() + delay.mul_f64(factor));
        self.failures += 1;
    }
}

impl Channel {
    /// A channel to `target` (`host:port`), with default settings.
    /// Nothing happens until the first call.
    pub fn new(target: impl Into<String>) -> Channel {
        Channel::with_config(target, ChannelConfig::default())
    }

    /// A channel with explicit settings.
    pub fn with_config(target: impl Into<String>, config: ChannelConfig) -> Channel {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
            | 1;
        let slots = (0..config.pool_size.max(1))
            .map(|i| Slot {
                conn: RwLock::new(None),
                connecting: tokio::sync::Mutex::new(Backoff {
                    seed: seed.wrapping_mul(i as u64 + 1),
                    ..Backoff::default()
                }),
            })
            .collect();
        Channel {
            inner: Arc::new(Inner {
                target: target.into(),
                config,
                slots,
                connector: None,
            }),
        }
    }

    /// A channel whose connections are opened by `connect` instead of by
    /// TCP: over a Unix socket, an in-memory pipe to a
    /// [`Server::serve_connection`](super::Server::serve_connection), a
    /// tunnel. `name` only names the channel in errors. Reconnection,
    /// pooling and every other setting work as for TCP (`tcp` and `tls`
    /// are not used).
    pub fn with_connector<F, Fut, IO>(
        name: impl Into<String>,
        config: ChannelConfig,
        connect: F,
    ) -> Channel
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::io::Result<IO>> + Send + 'static,
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        let connector: Connector = Arc::new(move || {
            let fut = connect();
            Box::pin(async move {
                let io = fut.await?;
                let (read, write) = tokio::io::split(io);
                let halves: (super::BoxRead, super::BoxWrite) = (Box::new(read), Box::new(write));
                Ok(halves)
            })
        });
        let mut channel = Channel::with_config(name, config);
        if let Some(inner) = Arc::get_mut(&mut channel.inner) {
            inner.connector = Some(connector);
        }
        channel
    }

    /// A unary call.
    ///
    /// # Errors
    ///
    /// The server's status, or a local one: `UNAVAILABLE` (no connection),
    /// `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED` (message too large for the
    /// server, or no capacity), `INTERNAL` (response does not decode).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels the call on the server.
    pub fn unary<'a, Req, Resp>(
        &'a self,
        path: &'a str,
        request: Request<Req>,
    ) -> UnaryCall<'a, Req, Resp>
    where
        Req: prost::Message + 'a,
        Resp: prost::Message + Default + 'a,
    {
        UnaryCall {
            channel: self,
            path,
            state: UnaryState::Start(request),
        }
    }

    /// The first poll of a unary call: on a connected channel with room,
    /// registers the call (with the caller's waker) and queues its CALL
    /// frame without awaiting anything. Anything else (connecting, waiting
    /// for capacity or queue room, retries) goes to the general path.
    fn start_unary<'a, Req, Resp>(
        &'a self,
        path: &'a str,
        request: Request<Req>,
        waker: &Waker,
    ) -> UnaryState<'a, Req, Resp>
    where
        Req: prost::Message + 'a,
        Resp: prost::Message + Default + 'a,
    {
        let retry = request.is_idempotent() && self.inner.config.retries > 0;
        let conn = match self.ready_connection() {
            Some(conn) if !retry => conn,
            _ => return UnaryState::Slow(Box::pin(self.unary_slow(path, request))),
        };
        let (msg, metadata, timeout) = request.into_parts();
        // The deadline runs from here, before anything is sent.
        let deadline = timeout.map(|t| Box::pin(tokio::time::sleep(t)));
        match conn.try_open_unary(path, &msg, metadata, timeout, waker) {
            Ok(call) => UnaryState::Waiting {
                call,
                deadline,
                first: true,
            },
            Err(Opened::Failed(status)) => UnaryState::Slow(Box::pin(async move { Err(status) })),
            Err(Opened::Later(metadata)) => {
                let attempt = async move {
                    let once = self.unary_once(path, &msg, metadata, timeout, true);
                    with_timeout(timeout, once).await
                };
                UnaryState::Slow(Box::pin(attempt))
            }
        }
    }

    /// A connection to use now, without waiting: the least loaded, or an
    /// idle one. `None` while a slot is still to be connected (the general
    /// path connects it).
    fn ready_connection(&self) -> Option<Arc<ClientConn>> {
        let slots = &self.inner.slots;
        if let [slot] = slots.as_slice() {
            return slot.conn.read().as_ref().filter(|c| c.usable()).cloned();
        }
        match self.survey() {
            (Some((0, c)), _) => Some(c),
            (best, empty) if empty.is_empty() => best.map(|(_, c)| c),
            _ => None,
        }
    }

    /// The pool as it is: its least loaded usable connection (with its
    /// load), and the slots without one.
    fn survey(&self) -> (Option<(usize, Arc<ClientConn>)>, Vec<usize>) {
        let mut best: Option<(usize, Arc<ClientConn>)> = None;
        let mut empty = Vec::new();
        for (i, slot) in self.inner.slots.iter().enumerate() {
            match slot.conn.read().as_ref() {
                Some(c) if c.usable() => {
                    let load = c.in_flight.load(Ordering::Relaxed);
                    if best.as_ref().is_none_or(|(l, _)| load < *l) {
                        best = Some((load, c.clone()));
                    }
                }
                _ => empty.push(i),
            }
        }
        (best, empty)
    }

    /// A unary call on the general path: waits for a connection and for
    /// room, and retries idempotent calls.
    async fn unary_slow<Req, Resp>(
        &self,
        path: &str,
        request: Request<Req>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let idempotent = request.is_idempotent();
        let (msg, metadata, timeout) = request.into_parts();
        let deadline = timeout.map(|t| Instant::now() + t);
        let cfg = &self.inner.config;
        let mut attempt = 0;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let once = self.unary_once(path, &msg, metadata.clone(), left, false);
            match with_timeout(left, once).await {
                Err(s)
                    if idempotent
                        && attempt < cfg.retries
                        && s.code() == Code::Unavailable
                        && !s.is_remote() =>
                {
                    // Wait out the reconnection backoff (with its jitter).
                    let delay = cfg
                        .backoff_base
                        .saturating_mul(1 << attempt.min(16))
                        .min(cfg.backoff_max)
                        .mul_f64(1.25);
                    attempt += 1;
                    if deadline.is_some_and(|d| Instant::now() + delay >= d) {
                        return Err(Status::deadline_exceeded(format!(
                            "deadline exceeded after {attempt} attempts: {s}"
                        )));
                    }
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    /// One attempt; `intercepted`: the metadata has been through the
    /// client interceptor already.
    async fn unary_once<Req, Resp>(
        &self,
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
        let conn = self.connection().await?;
        let metadata = if intercepted {
            metadata
        } else {
            conn.intercept(path, metadata)?
        };
        let mut call = conn
            .open_intercepted(path, Some(msg), metadata, timeout, true, None)
            .await?;
        let outcome = std::future::poll_fn(|cx| conn.poll_unary(call.id, cx)).await;
        (call.done, call.freed) = (true, true);
        decode_unary(outcome)
    }

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
        let conn = match self.connection().await {
            Ok(c) => c,
            Err(s) => return requests.into_iter().map(|_| Err(s.clone())).collect(),
        };
        let mut calls = Vec::new();
        {
            // Queue every CALL, then write them together.
            let _cork = conn.out.cork();
            for request in requests {
                let (msg, metadata, timeout) = request.into_parts();
                calls.push(
                    conn.open(path, Some(&msg), metadata, timeout, true, None)
                        .await,
                );
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
                        (call.done, call.freed) = (true, true);
                        *slot = Some(decode_unary(outcome));
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
            .map(|r| r.unwrap_or_else(|| Err(Status::internal("call result missing"))))
            .collect()
    }

    /// A server-streaming call: one request, a stream of responses.
    ///
    /// # Errors
    ///
    /// As [`Channel::unary`], for opening the call; the stream carries the
    /// rest.
    pub async fn server_streaming<Req, Resp>(
        &self,
        path: &str,
        request: Request<Req>,
    ) -> Result<ResponseStream<Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let (msg, metadata, timeout) = request.into_parts();
        let conn = self.connection().await?;
        let shared = conn.new_shared();
        let call = with_timeout(
            timeout,
            conn.open(
                path,
                Some(&msg),
                metadata,
                timeout,
                true,
                Some(shared.clone()),
            ),
        )
        .await?;
        Ok(conn.response_stream(call, shared))
    }

    /// A client-streaming call: send requests with the sink, then
    /// [`RequestSink::finish`] for the response. The request's message is
    /// unused (only its metadata and timeout count).
    ///
    /// # Errors
    ///
    /// As [`Channel::unary`], for opening the call.
    pub async fn client_streaming<Req, Resp>(
        &self,
        path: &str,
        request: Request<()>,
    ) -> Result<RequestSink<Req, Resp>, Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let (sink, responses) = self.bidi_streaming(path, request).await?;
        Ok(RequestSink {
            responses: Some(responses),
            ..sink
        })
    }

    /// A bidirectional call: a sink for requests and a stream of responses.
    /// The request's message is unused (only its metadata and timeout
    /// count).
    ///
    /// # Errors
    ///
    /// As [`Channel::unary`], for opening the call.
    pub async fn bidi_streaming<Req, Resp>(
        &self,
        path: &str,
        request: Request<()>,
    ) -> Result<(RequestSink<Req, Resp>, ResponseStream<Resp>), Status>
    where
        Req: prost::Message,
        Resp: prost::Message + Default,
    {
        let ((), metadata, timeout) = request.into_parts();
        let conn = self.connection().await?;
        let shared = conn.new_shared();
        let call = with_timeout(
            timeout,
            conn.open::<Req>(path, None, metadata, timeout, false, Some(shared.clone())),
        )
        .await?;
        let id = call.id;
        let guard = Arc::new(Mutex::new(call));
        let sink = RequestSink {
            conn: conn.clone(),
            shared: shared.clone(),
            id,
            guard: guard.clone(),
            closed: false,
            responses: None,
            _types: PhantomData,
        };
        let stream = Streaming::new(shared, conn.out.clone(), id, Some(Box::new(guard)));
        Ok((sink, ResponseStream { inner: stream }))
    }

    /// The least loaded usable connection, connecting if needed.
    ///
    /// An idle connection is used as is. Otherwise an empty slot is
    /// connected, by the first caller to claim it: callers that find a slot
    /// already connecting move on to the next one, so that a burst of first
    /// calls opens the pool rather than queueing on one connection.
    async fn connection(&self) -> Result<Arc<ClientConn>, Status> {
        let inner = &*self.inner;
        let (best, empty) = self.survey();
        if let Some((0, c)) = best {
            return Ok(c);
        }
        // Connecting is rare and its future large (TCP, TLS): boxed, so
        // that every call's future does not carry its state.
        for &i in &empty {
            if let Ok(backoff) = inner.slots[i].connecting.try_lock() {
                return Box::pin(self.connect_slot(i, backoff)).await;
            }
        }
        match (best, empty.first()) {
            (Some((_, c)), _) => Ok(c),
            // Every empty slot is being connected by someone: wait for one.
            (None, Some(&i)) => {
                Box::pin(async {
                    let backoff = inner.slots[i].connecting.lock().await;
                    self.connect_slot(i, backoff).await
                })
                .await
            }
            (None, None) => Err(Status::unavailable("no connection")),
        }
    }

    async fn connect_slot(
        &self,
        i: usize,
        mut backoff: tokio::sync::MutexGuard<'_, Backoff>,
    ) -> Result<Arc<ClientConn>, Status> {
        let inner = &*self.inner;
        let slot = &inner.slots[i];
        if let Some(c) = slot.conn.read().as_ref().filter(|c| c.usable()) {
            return Ok(c.clone());
        }
        if let Some(at) = backoff.next_attempt {
            if Instant::now() < at {
                return Err(Status::unavailable(format!(
                    "{}: connection lost, next attempt in {:?}",
                    inner.target,
                    at - Instant::now()
                )));
            }
        }
        let cfg = &inner.config;
        let attempt = tokio::time::timeout(cfg.connect_timeout, ClientConn::connect(inner)).await;
        match attempt {
            Ok(Ok(conn)) => {
                *backoff = Backoff {
                    seed: backoff.seed,
                    ..Backoff::default()
                };
                *slot.conn.write() = Some(conn.clone());
                Ok(conn)
            }
            Ok(Err(e)) => {
                backoff.failed(cfg.backoff_base, cfg.backoff_max);
                Err(Status::unavailable(format!(
                    "connecting to {}: {e}",
                    inner.target
                )))
            }
            Err(_) => {
                backoff.failed(cfg.backoff_base, cfg.backoff_max);
                Err(Status::unavailable(format!(
                    "connecting to {}: timed out",
                    inner.target
                )))
            }
        }
    }
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("target", &self.inner.target)
            .finish_non_exhaustive()
    }
}

async fn with_timeout<T>(
    timeout: Option<Duration>,
    fut: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match timeout {
        None => fut.await,
        Some(t) => tokio::time::timeout(t, fut)
            .await
            .unwrap_or_else(|_| Err(Status::deadline_exceeded("deadline exceeded"))),
    }
}

/// A unary call's answer: the response message, its leading metadata (if
/// any) and the trailers.
type Answer = (Bytes, Option<Metadata>, Metadata);

/// A unary call's outcome, decoded.
fn decode_unary<Resp: prost::Message + Default>(
    outcome: Result<Answer, Status>,
) -> Result<Response<Resp>, Status> {
    let (body, headers, trailers) = outcome?;
    let resp = Resp::decode(body)
        .map_err(|e| Status::internal(format!("response does not decode: {e}")))?;
    let resp = Response::new(resp).with_trailers(trailers);
    Ok(match headers {
        Some(h) => resp.with_metadata(h),
        None => resp,
    })
}

/// The future of [`Channel::unary`].
///
/// Written by hand rather than as an `async fn`, so that the common case
/// (a connected channel with room) is one small state: the call is
/// registered and queued on the first poll and completed on the next, with
/// no nested futures to build and move. Everything else runs on the
/// general path, boxed.
#[must_use = "futures do nothing unless polled"]
pub struct UnaryCall<'a, Req, Resp> {
    channel: &'a Channel,
    path: &'a str,
    state: UnaryState<'a, Req, Resp>,
}

type BoxedCall<'a, Resp> =
    std::pin::Pin<Box<dyn Future<Output = Result<Response<Resp>, Status>> + Send + 'a>>;

enum UnaryState<'a, Req, Resp> {
    /// Not polled yet.
    Start(Request<Req>),
    /// Sent: waiting for the response, and for the deadline if any.
    Waiting {
        call: CallHandle,
        deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
        /// Just sent: the waker is registered with the call already.
        first: bool,
    },
    /// The general path.
    Slow(BoxedCall<'a, Resp>),
    Done,
}

// Nothing inside is pinned in place: the request is only ever moved, and
// the futures are boxed.
impl<Req, Resp> Unpin for UnaryCall<'_, Req, Resp> {}

impl<'a, Req, Resp> Future for UnaryCall<'a, Req, Resp>
where
    Req: prost::Message + 'a,
    Resp: prost::Message + Default + 'a,
{
    type Output = Result<Response<Resp>, Status>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            match &mut this.state {
                UnaryState::Start(_) => {
                    let UnaryState::Start(request) =
                        std::mem::replace(&mut this.state, UnaryState::Done)
                    else {
                        unreachable!("matched Start above")
                    };
                    this.state = this.channel.start_unary(this.path, request, cx.waker());
                }
                UnaryState::Waiting {
                    call,
                    deadline,
                    first,
                } => {
                    if !std::mem::take(first) {
                        if let Poll::Ready(outcome) = call.conn.poll_unary(call.id, cx) {
                            (call.done, call.freed) = (true, true);
                            this.state = UnaryState::Done;
                            return Poll::Ready(decode_unary(outcome));
                        }
                    }
                    if let Some(sleep) = deadline {
                        if sleep.as_mut().poll(cx).is_ready() {
                            // Dropping the handle cancels the call.
                            this.state = UnaryState::Done;
                            return Poll::Ready(Err(Status::deadline_exceeded(
                                "deadline exceeded",
                            )));
                        }
                    }
                    return Poll::Pending;
                }
                UnaryState::Slow(fut) => {
                    let outcome = std::task::ready!(fut.as_mut().poll(cx));
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

/// Why [`ClientConn::try_open_unary`] did not open the call.
enum Opened {
    /// The call fails with this.
    Failed(Status),
    /// It must wait (for capacity, or queue room): take the general path,
    /// with the metadata as intercepted.
    Later(Metadata),
}

/// One connection's client side.
pub(crate) struct ClientConn {
    out: Sender<RpcEncoder>,
    calls: Mutex<Calls>,
    /// Set with `Calls::broken`, readable without the lock.
    unusable: std::sync::atomic::AtomicBool,
    in_flight: AtomicUsize,
    /// `in_flight` is kept (the pool has more than one connection to
    /// choose from).
    publish_load: bool,
    capacity: Notify,
    window: u32,
    wait_for_capacity: bool,
    interceptor: Option<super::ClientInterceptor>,
}

struct Calls {
    slab: Slab<Entry>,
    /// Callers waiting for a free slot (`capacity`).
    capacity_waiters: usize,
    /// Why the connection cannot take new calls.
    broken: Option<Status>,
    peer: Settings,
}

impl Calls {
    /// The entry of `id`, if the server may still send on it; a `what`
    /// frame on any other call is a protocol violation.
    fn open(&mut self, id: CallId, what: &str) -> Result<&mut Entry, Broken> {
        self.slab
            .get_mut(id as usize)
            .filter(|e| !e.server_done)
            .ok_or_else(|| Broken(format!("{what} on call {id} not open")))
    }
}

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
}

enum State {
    Unary {
        /// The response message and its leading metadata.
        body: Option<(Bytes, Option<Metadata>)>,
        end: Option<Result<Metadata, Status>>,
        waker: Option<Waker>,
    },
    Stream(Arc<CallShared>),
}

/// Frames (or runs of one stream's plain messages, each counted once)
/// decoded ahead of taking the call table's lock, at most. Short
/// enough that the callers of a run are woken (and, on another worker, run)
/// while the reader handles the next, and that callers opening calls are
/// not held off for long; long enough to amortise the lock. With 256 calls
/// in flight, 32 gave 26% more calls/s than 256 (A/B, 6 pairs).
const READ_RUN: usize = 32;

/// A protocol violation by the server.
struct Broken(String);

/// The connection's halves: plain TCP, or TLS after its handshake.
async fn transport(
    stream: tokio::net::TcpStream,
    target: &str,
    cfg: &ChannelConfig,
) -> std::io::Result<(super::BoxRead, super::BoxWrite)> {
    #[cfg(feature = "tls")]
    if let Some(tls) = &cfg.tls {
        let name = tls
            .server_name
            .as_deref()
            .unwrap_or_else(|| crate::tls::host_of(target));
        let stream = crate::tls::connect(tls.config.clone(), name, stream).await?;
        let (read, write) = tokio::io::split(stream);
        return Ok((Box::new(read), Box::new(write)));
    }
    #[cfg(not(feature = "tls"))]
    let _ = (target, cfg);
    let (read, write) = stream.into_split();
    Ok((Box::new(read), Box::new(write)))
}

impl ClientConn {
    async fn connect(inner: &Inner) -> std::io::Result<Arc<ClientConn>> {
        let (target, cfg) = (&inner.target, &inner.config);
        let (read, write) = match &inner.connector {
            Some(connect) => connect().await?,
            None => {
                let stream = conn::connect(target.as_str(), &cfg.tcp).await?;
                transport(stream, target, cfg).await?
            }
        };
        let max_frame = cfg.settings.max_frame_size;
        let (mut inbound, out) = Connection::from_parts(
            read,
            write,
            RunDecoder::new(max_frame),
            RpcEncoder::new(),
            cfg.conn
                .max_frame_len(max_frame as usize + tram_wire::MAX_HEADER_LEN),
        );
        out.force_send(Hello(cfg.settings))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let conn = Arc::new(ClientConn {
            out,
            calls: Mutex::new(Calls {
                slab: Slab::new(),
                capacity_waiters: 0,
                broken: None,
                peer: Settings::DEFAULT,
            }),
            publish_load: inner.slots.len() > 1,
            unusable: std::sync::atomic::AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            capacity: Notify::new(),
            window: cfg.settings.initial_credit,
            wait_for_capacity: cfg.wait_for_capacity,
            interceptor: cfg.interceptor.clone(),
        });
        // The connection is ready once the server's SETTINGS are in: until
        // then its limits (the largest frame above all) are unknown, and a
        // large first message would be refused.
        let (settled_tx, settled) = tokio::sync::oneshot::channel::<Result<(), Status>>();
        let reader = conn.clone();
        let keepalive = cfg.keepalive;
        tokio::spawn(async move {
            let mut settled_tx = Some(settled_tx);
            let why = reader
                .read_loop(&mut inbound, keepalive, &mut settled_tx)
                .await;
            if let Some(tx) = settled_tx {
                // Failed before the handshake finished: say why.
                let _ = tx.send(Err(why.clone()));
            }
            reader.fail_all(why);
            // Nothing more is read, so nothing more is sent: the GOAWAY
            // (if any) goes out, then the connection closes, rather than
            // lingering open until the pool replaces it.
            reader.out.close();
        });
        match settled.await {
            Ok(Ok(())) => Ok(conn),
            Ok(Err(why)) => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                why.message().to_owned(),
            )),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed before the server's SETTINGS arrived",
            )),
        }
    }

    fn usable(&self) -> bool {
        !self.unusable.load(Ordering::Acquire)
    }

    fn mark_broken(&self, calls: &mut Calls, why: Status) {
        calls.broken = Some(why);
        self.unusable.store(true, Ordering::Release);
    }

    fn new_shared(&self) -> Arc<CallShared> {
        let peer = self.calls.lock().peer;
        CallShared::new(self.window, peer.initial_credit)
    }

    /// The call's metadata, through the client interceptor if any.
    fn intercept(&self, path: &str, metadata: Metadata) -> Result<Metadata, Status> {
        match &self.interceptor {
            Some(i) => i.apply(path, metadata),
            None => Ok(metadata),
        }
    }

    /// Registers a call and sends its CALL frame.
    async fn open<M: prost::Message>(
        self: &Arc<Self>,
        path: &str,
        msg: Option<&M>,
        metadata: Metadata,
        timeout: Option<Duration>,
        end_stream: bool,
        shared: Option<Arc<CallShared>>,
    ) -> Result<CallHandle, Status> {
        let metadata = self.intercept(path, metadata)?;
        self.open_intercepted(path, msg, metadata, timeout, end_stream, shared)
            .await
    }

    /// [`ClientConn::open`], the metadata intercepted already.
    async fn open_intercepted<M: prost::Message>(
        self: &Arc<Self>,
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
        let id = loop {
            {
                let mut calls = self.calls.lock();
                if waiting.counted {
                    calls.capacity_waiters -= 1;
                    waiting.counted = false;
                }
                if let Some(s) = &calls.broken {
                    return Err(s.clone());
                }
                if calls.slab.len() < calls.peer.max_concurrent_calls as usize {
                    let state = match &shared {
                        Some(s) => State::Stream(s.clone()),
                        None => State::Unary {
                            body: None,
                            end: None,
                            waker: None,
                        },
                    };
                    let id = calls.slab.insert(Entry {
                        state,
                        client_open: !end_stream,
                        server_done: false,
                        answered: false,
                        abandoned: false,
                    });
                    break (id as CallId, self.count(&calls));
                }
                if !self.wait_for_capacity {
                    return Err(Status::resource_exhausted(
                        "connection at the server's max_concurrent_calls",
                    ));
                }
                calls.capacity_waiters += 1;
                waiting.counted = true;
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
        let (id, alone) = id;
        let mut handle = Arc::clone(self).handle(id);
        let head = call_head(id, end_stream, timeout, metadata);
        match self.out.send_hinted(Open { path, head, msg }, alone).await {
            Ok(()) => {
                handle.sent = true;
                Ok(handle)
            }
            Err(e) if e.kind() == conn::ErrorKind::Encode => {
                Err(Status::resource_exhausted(format!("request not sent: {e}")))
            }
            Err(_) => Err(self.broken_status()),
        }
    }

    /// Opens a unary call without waiting: registers it with `waker` and
    /// queues its CALL frame, or says why not.
    fn try_open_unary<M: prost::Message>(
        self: Arc<Self>,
        path: &str,
        msg: &M,
        metadata: Metadata,
        timeout: Option<Duration>,
        waker: &Waker,
    ) -> Result<CallHandle, Opened> {
        let metadata = self.intercept(path, metadata).map_err(Opened::Failed)?;
        // As in `open_intercepted`: a lone call is written inline, one among
        // others is queued for the writer task's next batch.
        let (id, alone) = {
            let mut calls = self.calls.lock();
            if let Some(s) = &calls.broken {
                return Err(Opened::Failed(s.clone()));
            }
            if calls.slab.len() >= calls.peer.max_concurrent_calls as usize {
                return Err(Opened::Later(metadata));
            }
            let id = calls.slab.insert(Entry {
                state: State::Unary {
                    body: None,
                    end: None,
                    waker: Some(waker.clone()),
                },
                client_open: false,
                server_done: false,
                answered: false,
                abandoned: false,
            }) as CallId;
            (id, self.count(&calls))
        };
        // The handle takes over the caller's reference to the connection
        // (a reference count is a line every caller's thread shares).
        let mut handle = self.handle(id);
        let head = call_head(id, true, timeout, metadata);
        let open = Open {
            path,
            head,
            msg: Some(msg),
        };
        match handle.conn.out.try_push(open, alone) {
            Ok(()) => {
                handle.sent = true;
                Ok(handle)
            }
            // Dropping the unsent handle frees the entry.
            Err(conn::TrySendError::Full(open)) => {
                Err(Opened::Later(open.head.metadata.unwrap_or_default()))
            }
            Err(conn::TrySendError::Encode(e)) => Err(Opened::Failed(Status::resource_exhausted(
                format!("request not sent: {e}"),
            ))),
            Err(conn::TrySendError::Closed(_)) => {
                let status = handle.conn.broken_status();
                drop(handle);
                Err(Opened::Failed(status))
            }
        }
    }

    /// The caller's handle on call `id`, not yet sent.
    fn handle(self: Arc<Self>, id: CallId) -> CallHandle {
        CallHandle {
            conn: self,
            id,
            sent: false,
            done: false,
            freed: false,
            cancel_code: Cell::new(Code::Cancelled),
        }
    }

    fn broken_status(&self) -> Status {
        self.calls
            .lock()
            .broken
            .clone()
            .unwrap_or_else(|| Status::unavailable("connection closed"))
    }

    /// Polls a unary call; when it returns `Ready` the call's entry is
    /// gone (set [`CallHandle::freed`]).
    fn poll_unary(&self, id: CallId, cx: &mut Context<'_>) -> Poll<Result<Answer, Status>> {
        let mut calls = self.calls.lock();
        let Some(entry) = calls.slab.get_mut(id as usize) else {
            return Poll::Ready(Err(Status::internal("call vanished")));
        };
        let State::Unary { body, end, waker } = &mut entry.state else {
            return Poll::Ready(Err(Status::internal("not a unary call")));
        };
        // Once the call has ended, its entry goes under this same lock (the
        // caller marks its handle freed, so dropping it takes no lock).
        match end.take() {
            Some(Ok(trailers)) => {
                let outcome = body
                    .take()
                    .map(|(b, headers)| (b, headers, trailers))
                    .ok_or_else(|| Status::internal("call ended without a response message"));
                self.free(&mut calls, id);
                Poll::Ready(outcome)
            }
            Some(Err(s)) => {
                self.free(&mut calls, id);
                Poll::Ready(Err(s))
            }
            None => {
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    fn response_stream<Resp>(
        self: &Arc<Self>,
        call: CallHandle,
        shared: Arc<CallShared>,
    ) -> ResponseStream<Resp> {
        let id = call.id;
        ResponseStream {
            inner: Streaming::new(
                shared,
                self.out.clone(),
                id,
                Some(Box::new(Mutex::new(call))),
            ),
        }
    }

    /// The caller is done with call `id`, finished or not.
    fn release(&self, id: CallId, sent: bool, code: Code) {
        let mut calls = self.calls.lock();
        let Some(entry) = calls.slab.get_mut(id as usize) else {
            return;
        };
        if sent && (!entry.server_done || entry.client_open) {
            // Still open on the wire: cancel; the entry goes when the
            // server's END arrives (PROTOCOL.md §6.1).
            if !entry.server_done || entry.client_open {
                let _ = self
                    .out
                    .force_send(Frame::Cancel(Cancel { call: id, code }));
            }
            entry.client_open = false;
            entry.abandoned = true;
            if let State::Stream(s) = &entry.state {
                s.abort(Status::cancelled("call dropped"));
            }
            if entry.server_done || calls.broken.is_some() {
                self.free(&mut calls, id);
            }
        } else {
            self.free(&mut calls, id);
        }
    }

    fn free(&self, calls: &mut Calls, id: CallId) {
        if calls.slab.try_remove(id as usize).is_some() {
            self.count(calls);
            // Only when someone waits: `notify_one` is a write to a line
            // every caller's thread would otherwise share.
            if calls.capacity_waiters > 0 {
                self.capacity.notify_one();
            }
        }
    }

    /// Publishes the number of calls open (for the pool's least-loaded
    /// choice) under the calls lock; true when the one just added is alone.
    fn count(&self, calls: &Calls) -> bool {
        let n = calls.slab.len();
        if self.publish_load {
            self.in_flight.store(n, Ordering::Relaxed);
        }
        n == 1
    }

    async fn read_loop(
        &self,
        inbound: &mut conn::Inbound<super::BoxRead, RunDecoder>,
        keepalive: Option<super::Keepalive>,
        settled_tx: &mut Option<tokio::sync::oneshot::Sender<Result<(), Status>>>,
    ) -> Status {
        let mut settled = false;
        let mut wakers = Vec::new();
        let mut batch = Vec::new();
        // Keepalive: the timer is only looked at when it fires; frames just
        // move `last_rx` (a clock read per read, no timer reset).
        let far = Duration::from_secs(3600);
        let mut last_rx = tokio::time::Instant::now();
        let mut ping_sent: Option<tokio::time::Instant> = None;
        let mut timer = std::pin::pin!(tokio::time::sleep(keepalive.map_or(far, |k| k.interval)));
        loop {
            let received = tokio::select! {
                biased;
                f = inbound.recv() => f,
                () = &mut timer, if keepalive.is_some() => {
                    let k = keepalive.unwrap_or_default();
                    let now = tokio::time::Instant::now();
                    let next = match ping_sent {
                        Some(sent) if last_rx < sent => {
                            if now >= sent + k.timeout {
                                return Status::unavailable("keepalive ping unanswered: server unreachable");
                            }
                            sent + k.timeout
                        }
                        _ if now >= last_rx + k.interval => {
                            let ping = tram_wire::Ping { ack: false, payload: [0; 8] };
                            let _ = self.out.force_send(Frame::Ping(ping));
                            ping_sent = Some(now);
                            now + k.timeout
                        }
                        _ => last_rx + k.interval,
                    };
                    timer.as_mut().reset(next);
                    continue;
                }
            };
            if keepalive.is_some() {
                last_rx = tokio::time::Instant::now();
            }
            let frame = match received {
                Some(Ok(f)) => f,
                Some(Err(e)) if e.kind() == conn::ErrorKind::Decode => {
                    return self.violation(Broken(format!("bad frame from server: {e}")));
                }
                Some(Err(e)) => return Status::unavailable(format!("connection lost: {e}")),
                None => return Status::unavailable("connection closed by the server"),
            };
            if !settled {
                let Received::Frame(Frame::Settings(s)) = frame else {
                    return self.violation(Broken("first frame is not SETTINGS".into()));
                };
                self.calls.lock().peer = s;
                self.out.with_encoder(|e| e.set_peer(s));
                self.capacity.notify_waiters();
                settled = true;
                if let Some(tx) = settled_tx.take() {
                    let _ = tx.send(Ok(()));
                }
                continue;
            }
            // The frames this read brought in are decoded a run at a time
            // (at most `READ_RUN`, which bounds the run's buffer), then
            // handled under one short lock: decoding under it would hold
            // off the callers on other threads for the whole run. Callers
            // are woken after it is released, so that they do not wake up
            // only to wait for it.
            let mut failed = None;
            batch.push(frame);
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
                {
                    let mut calls = self.calls.lock();
                    for frame in batch.drain(..) {
                        let handled = match frame {
                            Received::Frame(frame) => self.on_frame(&mut calls, frame, &mut wakers),
                            Received::Run(run) => self.on_run(&mut calls, run),
                        };
                        if let Err(b) = handled {
                            broken = Some(b);
                            break;
                        }
                    }
                }
                wakers.drain(..).for_each(Waker::wake);
                if let Some(b) = broken {
                    return self.violation(b);
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
            if let Some(e) = failed {
                return self.violation(Broken(format!("bad frame from server: {e}")));
            }
        }
    }

    fn violation(&self, b: Broken) -> Status {
        tracing::info!("closing connection: {}", b.0);
        let _ = self.out.force_send(Frame::GoAway(tram_wire::GoAway {
            last_call_seq: 0,
            reason: tram_wire::Reason::PROTOCOL_ERROR,
            message: b.0.clone(),
        }));
        Status::internal(format!("protocol error: {}", b.0))
    }

    /// Plain messages of one call: a stream's are queued on it whole; a
    /// unary call takes one (its END follows).
    fn on_run(&self, calls: &mut Calls, mut run: tram_wire::MessageRun) -> Result<(), Broken> {
        let id = run.call();
        let entry = calls.open(id, "MESSAGE")?;
        entry.answered = true;
        match &mut entry.state {
            State::Stream(s) => s
                .push_run(run)
                .map_err(|_| Broken(format!("MESSAGE without credit on call {id}"))),
            State::Unary { body, .. } => match (body.is_none() && run.len() == 1, run.next()) {
                (true, Some(payload)) => {
                    *body = Some((payload, None));
                    Ok(())
                }
                _ => Err(Broken(format!("two responses on unary call {id}"))),
            },
        }
    }

    fn on_frame(
        &self,
        calls: &mut Calls,
        frame: Frame,
        wakers: &mut Vec<Waker>,
    ) -> Result<(), Broken> {
        match frame {
            Frame::Message(m) => {
                let entry = calls.open(m.call, "MESSAGE")?;
                if std::mem::replace(&mut entry.answered, true) && m.metadata.is_some() {
                    return Err(Broken(format!(
                        "leading metadata after the first response on call {}",
                        m.call
                    )));
                }
                match &mut entry.state {
                    State::Unary { body, end, waker } => {
                        if body.is_some() || !m.end_stream {
                            // Unary responses are MESSAGE+END_STREAM, or
                            // MESSAGE then END with trailers.
                            if body.is_some() {
                                return Err(Broken(format!(
                                    "two responses on unary call {}",
                                    m.call
                                )));
                            }
                        }
                        *body = Some((m.payload, m.metadata));
                        if m.end_stream {
                            *end = Some(Ok(Metadata::new()));
                            entry.server_done = true;
                            wakers.extend(waker.take());
                        }
                    }
                    State::Stream(s) => {
                        if let Some(headers) = m.metadata {
                            s.set_headers(headers);
                        }
                        s.push(m.payload).map_err(|_| {
                            Broken(format!("MESSAGE without credit on call {}", m.call))
                        })?;
                        if m.end_stream {
                            s.close_inbox(Ok(()));
                            entry.server_done = true;
                        }
                    }
                }
                if m.end_stream {
                    self.ended(calls, m.call);
                }
                Ok(())
            }
            Frame::End(e) => {
                let id = e.call;
                let entry = calls.open(id, "END")?;
                entry.server_done = true;
                let outcome = if e.code == Code::Ok {
                    Ok(e.trailers.unwrap_or_default())
                } else {
                    Err(Status::from_wire(e))
                };
                match &mut entry.state {
                    State::Unary { end, waker, .. } => {
                        *end = Some(outcome);
                        wakers.extend(waker.take());
                    }
                    State::Stream(s) => match outcome {
                        Ok(_) => {
                            s.close_inbox(Ok(()));
                            s.abort(Status::new(Code::Ok, "call ended by the server"));
                        }
                        Err(status) => s.abort(status),
                    },
                }
                if entry.client_open {
                    // The server ended first: close our direction too.
                    entry.client_open = false;
                    let _ = self.out.force_send(Frame::Cancel(Cancel {
                        call: id,
                        code: Code::Cancelled,
                    }));
                }
                self.ended(calls, id);
                Ok(())
            }
            Frame::Credit(c) => {
                if let Some(Entry {
                    state: State::Stream(s),
                    ..
                }) = calls.slab.get(c.call as usize)
                {
                    s.add_credit(c.n)
                        .map_err(|_| Broken(format!("credit overflow on call {}", c.call)))?;
                }
                Ok(())
            }
            Frame::Ping(p) => {
                if let Some(pong) = p.reply() {
                    let _ = self.out.force_send(Frame::Ping(pong));
                }
                Ok(())
            }
            Frame::GoAway(g) => {
                // No new calls here; calls in flight finish or fail when the
                // connection closes.
                let why = Status::unavailable(format!("server going away: {}", g.message));
                self.mark_broken(calls, why);
                Ok(())
            }
            Frame::Settings(_) => Err(Broken("second SETTINGS".into())),
            other => Err(Broken(format!(
                "{:?} frame from the server",
                other.frame_type()
            ))),
        }
    }

    /// The server's direction of `id` ended: free it if the caller is gone.
    fn ended(&self, calls: &mut Calls, id: CallId) {
        if let Some(e) = calls.slab.get(id as usize) {
            if e.abandoned && !e.client_open {
                self.free(calls, id);
            }
        }
    }

    fn fail_all(&self, why: Status) {
        let mut calls = self.calls.lock();
        self.mark_broken(&mut calls, why.clone());
        let mut gone = Vec::new();
        for (id, entry) in calls.slab.iter_mut() {
            entry.server_done = true;
            entry.client_open = false;
            match &mut entry.state {
                State::Unary { end, waker, .. } => {
                    end.get_or_insert_with(|| Err(why.clone()));
                    if let Some(w) = waker.take() {
                        w.wake();
                    }
                }
                State::Stream(s) => s.abort(why.clone()),
            }
            if entry.abandoned {
                gone.push(id as CallId);
            }
        }
        for id in gone {
            self.free(&mut calls, id);
        }
        drop(calls);
        self.capacity.notify_waiters();
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
            self.conn.calls.lock().capacity_waiters -= 1;
        }
    }
}

/// The caller's hold on a call; dropping it before the call finished
/// cancels the call on the server.
struct CallHandle {
    conn: Arc<ClientConn>,
    id: CallId,
    sent: bool,
    done: bool,
    /// The entry is already gone (a unary call that completed).
    freed: bool,
    cancel_code: Cell<Code>,
}

impl Drop for CallHandle {
    fn drop(&mut self) {
        if self.freed {
            return;
        }
        let code = if self.done {
            Code::Ok
        } else {
            self.cancel_code.get()
        };
        self.conn.release(self.id, self.sent, code);
    }
}

/// The responses of a streaming call. Dropping it (and the call's
/// [`RequestSink`], if any) before the call ends cancels the call.
pub struct ResponseStream<M> {
    inner: Streaming<M>,
}

impl<M: prost::Message + Default> ResponseStream<M> {
    /// The next response, `Ok(None)` when the server ended the call with OK.
    ///
    /// # Errors
    ///
    /// The call's status: the server's, or `UNAVAILABLE` if the connection
    /// was lost.
    pub async fn message(&mut self) -> Result<Option<M>, Status> {
        self.inner.message().await
    }

    /// The response's leading metadata (headers), once the first response
    /// message has arrived: `None` before that, or when the server sent
    /// none. (A call that ends without any message carries it in its
    /// trailers, as gRPC's trailers-only responses do.)
    pub fn metadata(&self) -> Option<Metadata> {
        self.inner.headers()
    }
}

impl<M: prost::Message + Default> futures_core::Stream for ResponseStream<M> {
    type Item = Result<M, Status>;
    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_next(cx)
    }
}

impl<M> std::fmt::Debug for ResponseStream<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

/// Sends the requests of a client-streaming or bidirectional call.
pub struct RequestSink<Req, Resp = ()> {
    conn: Arc<ClientConn>,
    shared: Arc<CallShared>,
    id: CallId,
    guard: Arc<Mutex<CallHandle>>,
    closed: bool,
    /// Client streaming: where [`RequestSink::finish`] reads the response.
    responses: Option<ResponseStream<Resp>>,
    _types: PhantomData<fn(Req)>,
}

impl<Req: prost::Message, Resp: prost::Message + Default> RequestSink<Req, Resp> {
    /// Sends one request, waiting for the server's credit.
    ///
    /// # Errors
    ///
    /// The call's status if it has ended (the server may end it early), or
    /// `UNAVAILABLE`.
    pub async fn send(&mut self, msg: Req) -> Result<(), Status> {
        if self.closed {
            return Err(Status::failed_precondition("request stream already closed"));
        }
        send_message(&self.conn.out, &self.shared, self.id, &msg, false).await
    }

    /// Ends the request stream (a half-close); responses keep coming.
    pub fn close(&mut self) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        let mut calls = self.conn.calls.lock();
        if let Some(entry) = calls.slab.get_mut(self.id as usize) {
            if entry.client_open {
                entry.client_open = false;
                let _ = self
                    .conn
                    .out
                    .force_send(Frame::End(End::new(self.id, Code::Ok)));
            }
            if entry.server_done {
                self.guard.lock().done = true;
            }
        }
    }

    /// Client streaming: ends the request stream and waits for the response.
    ///
    /// # Errors
    ///
    /// The call's status.
    pub async fn finish(mut self) -> Result<Response<Resp>, Status> {
        self.close();
        let mut responses = self
            .responses
            .take()
            .ok_or_else(|| Status::failed_precondition("finish() is for client-streaming calls"))?;
        let msg = responses
            .message()
            .await?
            .ok_or_else(|| Status::internal("call ended without a response message"))?;
        self.guard.lock().done = true;
        let resp = Response::new(msg);
        Ok(match responses.inner.headers() {
            Some(h) => resp.with_metadata(h),
            None => resp,
        })
    }
}

impl<Req, Resp> std::fmt::Debug for RequestSink<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestSink")
            .field("call", &self.id)
            .field("closed", &self.closed)
            .finish()
    }
}
