//! The gateway at the HTTP/2 level, with a raw h2 client: requests that are
//! not gRPC, unsupported encodings, unknown methods, and RST_STREAM
//! cancelling the tram handler.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, Request};
use tokio::net::TcpStream;
use tram::conn::{Listener, TcpConfig};
use tram::gateway::RawMessage;
use tram::{Response, Server};

const SLEEP: &str = "/test.Slow/Sleep";
const ECHO: &str = "/test.Slow/Echo";

/// A server whose `SLEEP` method sleeps (it counts handlers dropped
/// unfinished) and whose `ECHO` answers at once (a `unary_sync` handler,
/// which the gateway runs as a `unary` one).
async fn start(dropped: Arc<AtomicUsize>) -> SocketAddr {
    let server = Server::builder()
        .unary(SLEEP, move |req: tram::rpc::Request<RawMessage>| {
            let dropped = dropped.clone();
            async move {
                struct Guard(Arc<AtomicUsize>, bool);
                impl Drop for Guard {
                    fn drop(&mut self) {
                        if !self.1 {
                            self.0.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                let mut g = Guard(dropped, false);
                tokio::time::sleep(Duration::from_secs(30)).await;
                g.1 = true;
                Ok(Response::new(req.into_inner()))
            }
        })
        .unary_sync(ECHO, |req: tram::rpc::Request<RawMessage>| {
            Ok(Response::new(req.into_inner()))
        })
        .build();
    serve(server).await
}

/// Serves `server` with its gateway on an ephemeral loopback port.
async fn serve(server: Server) -> SocketAddr {
    let server = tram_grpc::with_gateway(server);
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    addr
}

async fn h2(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(conn);
    client.ready().await.unwrap()
}

fn grpc_request(path: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut r = Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(()).unwrap()
}

fn one_message(body: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u8(0);
    b.put_u32(body.len() as u32);
    b.put_slice(body);
    b.freeze()
}

/// Sends `req` with `body`, returns the response headers (for a
/// trailers-only response, they hold the status).
async fn call(addr: SocketAddr, req: Request<()>, body: Bytes) -> (http::StatusCode, HeaderMap) {
    let mut client = h2(addr).await;
    let (resp, mut send) = client.send_request(req, false).unwrap();
    // The gateway may answer (and reset the stream with NO_ERROR) from the
    // headers alone, before the body is sent; HTTP/2 allows that, so a
    // failed send here is not an error of the test's concern.
    let _ = send.send_data(body, true);
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .unwrap()
        .unwrap();
    (resp.status(), resp.headers().clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_http_and_grpc_errors() {
    let addr = start(Arc::default()).await;
    // Not gRPC at all.
    let req = Request::builder()
        .method("POST")
        .uri(format!("http://localhost{SLEEP}"))
        .header("content-type", "text/plain")
        .body(())
        .unwrap();
    let (status, _) = call(addr, req, Bytes::new()).await;
    assert_eq!(status, http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // An encoding the gateway does not speak: UNIMPLEMENTED, trailers-only,
    // with what it does accept.
    let req = grpc_request(SLEEP, &[("grpc-encoding", "br")]);
    let (status, h) = call(addr, req, one_message(b"")).await;
    assert_eq!(status, http::StatusCode::OK);
    assert_eq!(h["grpc-status"], "12");
    assert!(h["grpc-accept-encoding"].to_str().unwrap().contains("gzip"));
    // An unknown method: UNIMPLEMENTED, trailers-only.
    let req = grpc_request(
        "/no.Such/Method",
        &[("content-type", "application/grpc+proto")],
    );
    let (_, h) = call(addr, req, one_message(b"")).await;
    assert_eq!(h["grpc-status"], "12");
    // A deadline the handler cannot meet: DEADLINE_EXCEEDED from tram.
    let req = grpc_request(SLEEP, &[("grpc-timeout", "50m")]);
    let mut client = h2(addr).await;
    let (resp, mut send) = client.send_request(req, false).unwrap();
    send.send_data(one_message(b""), true).unwrap();
    let resp = resp.await.unwrap();
    let status = match resp.headers().get("grpc-status") {
        Some(s) => s.clone(),
        None => {
            let mut body = resp.into_body();
            while body.data().await.is_some() {}
            body.trailers().await.unwrap().unwrap()["grpc-status"].clone()
        }
    };
    assert_eq!(status, "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rst_stream_cancels_the_handler() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let addr = start(dropped.clone()).await;
    let mut client = h2(addr).await;
    let (_resp, mut send) = client
        .send_request(grpc_request(SLEEP, &[]), false)
        .unwrap();
    send.send_data(one_message(b"x"), true).unwrap();
    // Let the call reach the handler, then reset the stream.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    send.send_reset(h2::Reason::CANCEL);
    tokio::time::timeout(Duration::from_secs(5), async {
        while dropped.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the handler is dropped after RST_STREAM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interceptors_guard_grpc_calls_too() {
    let server = Server::builder()
        .interceptor(|call| match call.metadata.get("authorization") {
            Some(b"Bearer ok") => Ok(()),
            _ => Err(tram::rpc::Status::unauthenticated("token required")),
        })
        .unary(SLEEP, |req: tram::rpc::Request<RawMessage>| async move {
            Ok(Response::new(req.into_inner()))
        })
        .build();
    let addr = serve(server).await;
    let (_, h) = call(addr, grpc_request(SLEEP, &[]), one_message(b"x")).await;
    assert_eq!(h["grpc-status"], "16");
    assert_eq!(
        tram_grpc::decode_message(h["grpc-message"].to_str().unwrap()),
        "token required"
    );
    let req = grpc_request(SLEEP, &[("authorization", "Bearer ok")]);
    let (status, h) = call(addr, req, one_message(b"x")).await;
    assert_eq!(status, http::StatusCode::OK);
    assert!(h.get("grpc-status").is_none(), "not trailers-only: {h:?}");
}

/// The calls of one HTTP/2 connection share its task: waiting calls do not
/// hold up others, and closing the connection drops (cancels) every call
/// still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_one_connection_run_side_by_side() {
    let dropped = Arc::new(AtomicUsize::new(0));
    let addr = start(dropped.clone()).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let mut sleeping = Vec::new();
    for _ in 0..3 {
        let (resp, mut send) = client
            .send_request(grpc_request(SLEEP, &[]), false)
            .unwrap();
        send.send_data(one_message(b"z"), true).unwrap();
        sleeping.push((resp, send));
        client = client.ready().await.unwrap();
    }
    // The same connection answers other calls meanwhile.
    for i in 0..10u8 {
        let (resp, mut send) = client.send_request(grpc_request(ECHO, &[]), false).unwrap();
        send.send_data(one_message(&[i]), true).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(5), resp)
            .await
            .expect("an echo beside sleeping calls")
            .unwrap();
        assert_eq!(resp.status(), http::StatusCode::OK);
        let mut body = resp.into_body();
        let data = body.data().await.unwrap().unwrap();
        assert_eq!(&data[..], &one_message(&[i])[..]);
        let trailers = body.trailers().await.unwrap().unwrap();
        assert_eq!(trailers["grpc-status"], "0");
        client = client.ready().await.unwrap();
    }
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    // Closing the connection cancels the three.
    drop((client, sleeping));
    conn.abort();
    tokio::time::timeout(Duration::from_secs(5), async {
        while dropped.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the connection's handlers are dropped when it closes");
}

/// A handler's leading metadata reaches a gRPC client as response headers
/// (with the unary answer, or with a server stream's first message), its
/// trailers as trailers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leading_metadata_becomes_response_headers() {
    const UNARY: &str = "/test.Lead/Unary";
    const STREAM: &str = "/test.Lead/Stream";
    let md = |k: &str, v: &str| tram::rpc::Metadata::builder().ascii(k, v).unwrap().build();
    let server = Server::builder()
        .unary(
            UNARY,
            move |req: tram::rpc::Request<RawMessage>| async move {
                Ok(Response::new(req.into_inner())
                    .with_metadata(md("x-lead", "unary"))
                    .with_trailers(md("x-trail", "t")))
            },
        )
        .server_streaming(
            STREAM,
            move |req: tram::rpc::Request<RawMessage>| async move {
                let m = req.into_inner();
                let items = vec![Ok(m.clone()), Ok(m)];
                Ok(Response::new(tokio_stream::iter(items)).with_metadata(md("x-lead", "stream")))
            },
        )
        .build();
    let addr = serve(server).await;
    for (path, lead, messages) in [(UNARY, "unary", 1), (STREAM, "stream", 2)] {
        let mut client = h2(addr).await;
        let (resp, mut send) = client.send_request(grpc_request(path, &[]), false).unwrap();
        send.send_data(one_message(b"m"), true).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(5), resp)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(resp.headers()["x-lead"], lead, "{path}");
        let mut body = resp.into_body();
        let mut got = 0;
        while let Some(data) = body.data().await {
            got += data.unwrap().len();
        }
        assert_eq!(got, messages * one_message(b"m").len(), "{path}");
        let trailers = body.trailers().await.unwrap().unwrap();
        assert_eq!(trailers["grpc-status"], "0");
        assert!(trailers.get("x-lead").is_none(), "{path}: {trailers:?}");
        if path == UNARY {
            assert_eq!(trailers["x-trail"], "t");
        }
    }
}
