//! One unary call run in the caller's task, without a connection: what a
//! gateway does with another protocol's unary calls. The handler answers
//! into a buffer as it would into a connection, and the answer is read
//! back from its frames.

use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::time::Instant;
use tram_wire::{Code, Frame, FrameDecoder};

use super::super::codec::RpcEncoder;
use super::super::intercept::CallInfo;
use super::super::unary::UnaryAnswer;
use super::super::{Request, Response, Status};
use super::Server;
use super::handler::{IncomingCall, MethodKind};
use crate::conn;
use crate::gateway::RawMessage;
use crate::observe::{OTHER_METHOD, Observed, observe};

/// Runs one unary call to the method at `path` of `server` in the calling
/// task: the server's interceptor and metadata limit apply, then the
/// handler runs under the request's deadline. The message is passed
/// through undecoded. `system` names the protocol the call came in (`grpc`,
/// `connectrpc`) for the server's observers.
///
/// # Errors
///
/// `UNIMPLEMENTED` if `path` is not a unary method of `server`, the
/// interceptor's or the handler's status.
pub async fn call_unary(
    server: &Server,
    path: &str,
    request: Request<RawMessage>,
    peer: SocketAddr,
    system: &'static str,
) -> Result<Response<RawMessage>, Status> {
    let config = &server.config;
    let observers = &config.observers;
    let route = server
        .routes
        .0
        .get(path)
        .filter(|r| r.kind == MethodKind::Unary);
    let deadline = request.timeout().map(|t| Instant::now() + t);
    let (msg, metadata, _) = request.into_parts();
    let Some(route) = route else {
        let method = || observers.method(system, OTHER_METHOD);
        let observed = observe(observers, method, Some(peer), &metadata, None);
        Observed::finish(observed, Code::Unimplemented);
        return Err(Status::unimplemented(format!("no unary method {path}")));
    };
    let observed = observe(
        observers,
        || route.observed(observers, system),
        Some(peer),
        &metadata,
        None,
    );
    let settings = config.settings;
    let refused = if metadata.encoded_len() > settings.max_metadata_size as usize {
        Err(Status::resource_exhausted("request metadata too large"))
    } else if let Some(check) = &config.interceptor {
        check.check(&CallInfo {
            method: path,
            metadata: &metadata,
            peer,
            peer_certificates: None,
        })
    } else {
        Ok(())
    };
    if let Err(status) = refused {
        Observed::finish(observed, status.code());
        return Err(status);
    }
    if let Some(o) = &observed {
        o.request_message(|| msg.0.len());
    }
    let captured = Arc::new(Mutex::new(BytesMut::new()));
    let mut encoder = RpcEncoder::new();
    encoder.set_peer(settings);
    // Always written inline (the writer future is never needed). Small
    // buffers: they grow to the answer's size, where the connection
    // default would cost more in allocating and faulting in pages than the
    // whole call.
    let (out, _writer) = conn::outbound_channel(
        encoder,
        Capture(captured.clone()),
        config.conn.inline_writes(true).buffer_size(256),
    );
    let call = IncomingCall {
        call: 1,
        message: Some(msg.0),
        metadata,
        deadline,
        out,
        shared: None,
        observed,
    };
    (route.handler)(call).await;
    let mut bytes = std::mem::take(&mut *captured.lock());
    let mut decoder = FrameDecoder::new(settings.max_frame_size);
    let mut answer = UnaryAnswer::default();
    while !answer.is_done() {
        match decoder.decode(&mut bytes) {
            Ok(Some(Frame::Message(m))) => answer
                .message(m.payload, m.metadata, m.end_stream)
                .map_err(|_| Status::internal("the handler answered twice"))?,
            Ok(Some(Frame::End(end))) => answer.end(end),
            Ok(Some(_)) => {}
            Ok(None) => return Err(Status::internal("the handler ended without an answer")),
            Err(e) => return Err(Status::internal(format!("handler answer: {e}"))),
        }
    }
    let (body, headers, trailers) = answer
        .take()
        .unwrap_or_else(|| Err(Status::internal("the handler ended without an answer")))?;
    Ok(Response::new(RawMessage(body))
        .with_metadata(headers.unwrap_or_default())
        .with_trailers(trailers))
}

/// Collects what a handler run by [`call_unary`] writes.
struct Capture(Arc<Mutex<BytesMut>>);

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.0.lock().extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
