//! The echo service of the RPC tests, its message and helpers.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tram::rpc::{Channel, Code, Metadata, Request, Response, Server, ServerBuilder, Status};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Echo {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    pub payload: Bytes,
}

pub fn echo(id: u64) -> Echo {
    Echo {
        id,
        payload: Bytes::from(format!("payload {id}")),
    }
}

/// Starts `server` on an ephemeral port; returns its address and a handle
/// that stops it (gracefully) when dropped or sent to.
pub async fn start(
    server: Server,
) -> (SocketAddr, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    super::serve(server).await
}

/// A channel to `addr` that has made one call, so that its connection is
/// open and the server's settings are known.
pub async fn connected(addr: SocketAddr) -> Channel {
    let ch = Channel::new(addr.to_string());
    let _: Response<Echo> = ch
        .unary("/test.Echo/Say", Request::new(echo(0)))
        .await
        .unwrap();
    ch
}

/// A stream over an mpsc receiver (what handlers commonly return).
pub struct Rx<T>(pub mpsc::Receiver<Result<T, Status>>);

impl<T> futures_core::Stream for Rx<T> {
    type Item = Result<T, Status>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// `n` messages, every one ready at once, then the end, or `fail` if set.
pub struct Burst {
    pub next: u64,
    pub n: u64,
    pub fail: Option<Status>,
}

impl futures_core::Stream for Burst {
    type Item = Result<Echo, Status>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.next < self.n {
            self.next += 1;
            return std::task::Poll::Ready(Some(Ok(echo(self.next - 1))));
        }
        std::task::Poll::Ready(self.fail.take().map(Err))
    }
}

/// Signals when dropped: how tests observe a handler being cancelled.
pub struct DropSignal(pub Option<oneshot::Sender<Instant>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(Instant::now());
        }
    }
}

/// The echo service every RPC test calls: unary, streaming and failing
/// methods under `/test.Echo/`.
pub fn echo_service() -> ServerBuilder {
    Server::builder()
        .unary("/test.Echo/Say", |req: Request<Echo>| async move {
            let md = req.metadata().clone();
            let mut trailers = Metadata::builder();
            if let Some(v) = md.get("x-echo") {
                trailers
                    .ascii("x-echoed", std::str::from_utf8(v).unwrap())
                    .unwrap();
            }
            let mut headers = Metadata::builder();
            if let Some(v) = md.get("x-echo-initial") {
                headers
                    .ascii("x-initial", std::str::from_utf8(v).unwrap())
                    .unwrap();
            }
            Ok(Response::new(req.into_inner())
                .with_metadata(headers.build())
                .with_trailers(trailers.build()))
        })
        .unary("/test.Echo/Sleep", |req: Request<Echo>| async move {
            // Sleeps `id` milliseconds, then answers.
            tokio::time::sleep(Duration::from_millis(req.get_ref().id)).await;
            Ok(Response::new(req.into_inner()))
        })
        .unary("/test.Echo/Fail", |req: Request<Echo>| async move {
            let code = Code::from_u64(req.get_ref().id).unwrap();
            let trailers = Metadata::builder()
                .binary("why-bin", &[1, 2, 3])
                .unwrap()
                .build();
            Err::<Response<Echo>, _>(
                Status::new(code, format!("failed with {code}"))
                    .with_details(Bytes::from_static(b"\x08\x01"))
                    .with_trailers(trailers),
            )
        })
        .server_streaming("/test.Echo/Count", |req: Request<Echo>| async move {
            let n = req.get_ref().id;
            let (tx, rx) = mpsc::channel(16);
            tokio::spawn(async move {
                for i in 0..n {
                    if tx.send(Ok(echo(i))).await.is_err() {
                        return;
                    }
                }
            });
            let headers = Metadata::builder()
                .ascii("x-count", &n.to_string())
                .unwrap()
                .build();
            Ok(Response::new(Rx(rx)).with_metadata(headers))
        })
        .server_streaming("/test.Echo/Burst", |req: Request<Echo>| async move {
            // `id` messages; a payload of "fail" ends the stream with an
            // error after them.
            let fail = (&req.get_ref().payload[..] == b"fail").then(|| Status::aborted("enough"));
            Ok(Response::new(Burst {
                next: 0,
                n: req.get_ref().id,
                fail,
            }))
        })
        .client_streaming(
            "/test.Echo/Sum",
            |req: Request<tram::rpc::Streaming<Echo>>| async move {
                let mut requests = req.into_inner();
                let mut sum = 0;
                while let Some(m) = requests.message().await? {
                    sum += m.id;
                }
                Ok(Response::new(echo(sum)))
            },
        )
        .bidi_streaming(
            "/test.Echo/Chat",
            |req: Request<tram::rpc::Streaming<Echo>>| async move {
                let mut requests = req.into_inner();
                let (tx, rx) = mpsc::channel(16);
                tokio::spawn(async move {
                    while let Ok(Some(m)) = requests.message().await {
                        if tx
                            .send(Ok(Echo {
                                id: m.id * 2,
                                payload: m.payload,
                            }))
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                });
                Ok(Response::new(Rx(rx)))
            },
        )
}

/// Adds `/test.Echo/Hang`, whose handler never answers; the receiver gets
/// the time its future was dropped (the call cancelled).
pub fn with_hang(builder: ServerBuilder) -> (ServerBuilder, oneshot::Receiver<Instant>) {
    let (dropped_tx, dropped_rx) = oneshot::channel();
    let dropped_tx = Arc::new(parking_lot::Mutex::new(Some(dropped_tx)));
    let builder = builder.unary("/test.Echo/Hang", move |_req: Request<Echo>| {
        let signal = DropSignal(dropped_tx.lock().take());
        async move {
            let _signal = signal;
            std::future::pending::<()>().await;
            Ok(Response::new(echo(0)))
        }
    });
    (builder, dropped_rx)
}
