//! HTTP/1.1 on the tram port, byte by byte over loopback: keep-alive and
//! pipelining, Connect unary and streaming bodies, gRPC-Web binary and
//! text, and hostile input (a garbage request, an oversized head, a
//! stalled request, an oversized body) answered with an HTTP error on that
//! one connection while others go on.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tram::conn::{Listener, TcpConfig};
use tram::gateway::RawMessage;
use tram::{Response, Server, Status};

const ECHO: &str = "/test.Web/Echo";
const REPEAT: &str = "/test.Web/Repeat";
const FAIL: &str = "/test.Web/Fail";

/// Echo answers with its request; Repeat streams its request three times;
/// Fail fails with `NOT_FOUND`.
async fn start() -> SocketAddr {
    let server = Server::builder()
        .unary(ECHO, |req: tram::rpc::Request<RawMessage>| async move {
            Ok(Response::new(req.into_inner()))
        })
        .server_streaming(REPEAT, |req: tram::rpc::Request<RawMessage>| async move {
            let m = req.into_inner();
            let items: Vec<Result<RawMessage, Status>> = vec![Ok(m.clone()), Ok(m.clone()), Ok(m)];
            Ok(Response::new(futures_util::stream::iter(items)))
        })
        .unary(FAIL, |_req: tram::rpc::Request<RawMessage>| async move {
            Err::<Response<RawMessage>, _>(Status::not_found("no such thing"))
        })
        .build();
    let config = tram_grpc::GatewayConfig {
        max_message_size: 1024,
        ..tram_grpc::GatewayConfig::default()
    };
    let server = tram_grpc::with_gateway_config(server, config);
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    addr
}

fn post(path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: test\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// One HTTP/1.1 response: status, headers (lower-cased names), body (by
/// content-length or chunked).
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads responses from `conn` as they come.
struct Reader {
    conn: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    async fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), self.conn.read(&mut chunk))
            .await
            .expect("the server answers")
            .unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n > 0
    }

    async fn line(&mut self) -> String {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8(self.buf[..i].to_vec()).unwrap();
                self.buf.drain(..i + 2);
                return line;
            }
            assert!(self.fill().await, "connection closed inside a line");
        }
    }

    async fn bytes(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.fill().await, "connection closed inside a body");
        }
        self.buf.drain(..n).collect()
    }

    async fn answer(&mut self) -> Answer {
        let status_line = self.line().await;
        let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let mut headers = Vec::new();
        loop {
            let line = self.line().await;
            if line.is_empty() {
                break;
            }
            let (n, v) = line.split_once(':').unwrap();
            headers.push((n.to_ascii_lowercase(), v.trim().to_owned()));
        }
        let mut answer = Answer {
            status,
            headers,
            body: Vec::new(),
        };
        if let Some(len) = answer.header("content-length") {
            let len = len.parse().unwrap();
            answer.body = self.bytes(len).await;
        } else if answer.header("transfer-encoding") == Some("chunked") {
            loop {
                let len = usize::from_str_radix(&self.line().await, 16).unwrap();
                let chunk = self.bytes(len).await;
                self.line().await;
                if len == 0 {
                    break;
                }
                answer.body.extend(chunk);
            }
        }
        answer
    }

    /// Whether the server closed the connection (reads hit the end).
    async fn closed(&mut self) -> bool {
        self.buf.clear();
        !self.fill().await
    }
}

async fn connect(addr: SocketAddr) -> Reader {
    Reader {
        conn: TcpStream::connect(addr).await.unwrap(),
        buf: Vec::new(),
    }
}

/// A 5-byte-prefixed frame (Connect envelope or gRPC-Web message).
fn framed(flags: u8, data: &[u8]) -> Vec<u8> {
    let mut out = vec![flags];
    out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// The frames of a streamed body: (flags, data).
fn frames(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
        out.push((body[0], body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    out
}

#[tokio::test]
async fn keep_alive_and_pipelined_requests_answer_in_order() {
    let addr = start().await;
    let mut c = connect(addr).await;
    let mut both = post(ECHO, "application/proto", b"first");
    both.extend(post(ECHO, "application/proto", b"second"));
    c.conn.write_all(&both).await.unwrap();
    let a = c.answer().await;
    let b = c.answer().await;
    assert_eq!((a.status, &a.body[..]), (200, &b"first"[..]));
    assert_eq!(a.header("content-type"), Some("application/proto"));
    assert_eq!((b.status, &b.body[..]), (200, &b"second"[..]));
    // And the connection stays open for more.
    c.conn
        .write_all(&post(ECHO, "application/proto", b"third"))
        .await
        .unwrap();
    assert_eq!(c.answer().await.body, b"third");
}

#[tokio::test]
async fn connect_errors_are_json_with_http_statuses() {
    let addr = start().await;
    let mut c = connect(addr).await;
    c.conn
        .write_all(&post(FAIL, "application/proto", b""))
        .await
        .unwrap();
    let a = c.answer().await;
    assert_eq!(a.status, 404);
    let err: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(
        err,
        serde_json::json!({"code": "not_found", "message": "no such thing"})
    );
    // No descriptors, so no JSON: said plainly.
    c.conn
        .write_all(&post(ECHO, "application/json", b"{}"))
        .await
        .unwrap();
    let a = c.answer().await;
    assert_eq!(a.status, 501);
    assert!(String::from_utf8_lossy(&a.body).contains("descriptors"));
    // Not a protocol served here.
    c.conn
        .write_all(&post(ECHO, "text/plain", b"hi"))
        .await
        .unwrap();
    assert_eq!(c.answer().await.status, 415);
    // An unknown method.
    c.conn
        .write_all(&post("/test.Web/Nope", "application/proto", b""))
        .await
        .unwrap();
    let a = c.answer().await;
    assert_eq!(a.status, 501);
    // A timeout Connect does not allow.
    let mut req = post(ECHO, "application/proto", b"x");
    let at = req.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    req.splice(
        at..at,
        b"\r\nconnect-timeout-ms: 12345678901".iter().copied(),
    );
    c.conn.write_all(&req).await.unwrap();
    assert_eq!(c.answer().await.status, 400);
}

#[tokio::test]
async fn connect_streams_are_enveloped_and_end_with_end_stream() {
    let addr = start().await;
    let mut c = connect(addr).await;
    c.conn
        .write_all(&post(
            REPEAT,
            "application/connect+proto",
            &framed(0, b"hey"),
        ))
        .await
        .unwrap();
    let a = c.answer().await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("content-type"), Some("application/connect+proto"));
    let f = frames(&a.body);
    assert_eq!(f.len(), 4);
    assert!(f[..3].iter().all(|(flags, d)| *flags == 0 && d == b"hey"));
    assert_eq!(f[3].0, 0x02);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&f[3].1).unwrap(),
        serde_json::json!({})
    );
    // An error ends the stream inside the body, under HTTP 200.
    c.conn
        .write_all(&post(FAIL, "application/connect+proto", &framed(0, b"")))
        .await
        .unwrap();
    let a = c.answer().await;
    assert_eq!(a.status, 200);
    let f = frames(&a.body);
    let end: serde_json::Value = serde_json::from_slice(&f[0].1).unwrap();
    assert_eq!(end["error"]["code"], "not_found");
}

#[tokio::test]
async fn grpc_web_binary_and_text() {
    let addr = start().await;
    let mut c = connect(addr).await;
    c.conn
        .write_all(&post(
            REPEAT,
            "application/grpc-web+proto",
            &framed(0, b"m"),
        ))
        .await
        .unwrap();
    let a = c.answer().await;
    assert_eq!(a.status, 200);
    let f = frames(&a.body);
    assert_eq!(f.len(), 4);
    assert_eq!(f[0], (0, b"m".to_vec()));
    assert_eq!(f[3].0, 0x80);
    assert!(String::from_utf8_lossy(&f[3].1).contains("grpc-status: 0\r\n"));

    let b64 = base64::engine::general_purpose::STANDARD;
    let body = b64.encode(framed(0, b"text"));
    c.conn
        .write_all(&post(ECHO, "application/grpc-web-text", body.as_bytes()))
        .await
        .unwrap();
    let a = c.answer().await;
    assert_eq!(
        a.header("content-type"),
        Some("application/grpc-web-text+proto")
    );
    // Each frame is base64 on its own; decode chunk by chunk.
    let text = String::from_utf8(a.body).unwrap();
    let mut raw = Vec::new();
    for chunk in text
        .split_inclusive('=')
        .filter(|c| !c.trim_matches('=').is_empty())
    {
        raw.extend(b64.decode(chunk).unwrap());
    }
    let f = frames(&raw);
    assert_eq!(f[0], (0, b"text".to_vec()));
    assert!(String::from_utf8_lossy(&f[1].1).contains("grpc-status: 0"));

    c.conn
        .write_all(&post(FAIL, "application/grpc-web", &framed(0, b"")))
        .await
        .unwrap();
    let a = c.answer().await;
    let f = frames(&a.body);
    let trailer = String::from_utf8_lossy(&f[0].1).into_owned();
    assert!(trailer.contains("grpc-status: 5\r\n"), "{trailer}");
    assert!(trailer.contains("grpc-message: no such thing"), "{trailer}");
}

#[tokio::test]
async fn hostile_input_closes_that_connection_only() {
    let addr = start().await;
    let mut good = connect(addr).await;
    // A request stalled halfway through its head, held open throughout.
    let mut stalled = connect(addr).await;
    stalled
        .conn
        .write_all(b"POST /test.Web/Echo HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();

    let mut garbage = connect(addr).await;
    garbage
        .conn
        .write_all(b"GARBAGE\x00\x01\x02 nonsense\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(garbage.answer().await.status, 400);
    assert!(garbage.closed().await);

    let mut huge = connect(addr).await;
    let mut head = b"POST /test.Web/Echo HTTP/1.1\r\nhost: x\r\n".to_vec();
    for i in 0..2000 {
        head.extend(format!("x-filler-{i}: {}\r\n", "y".repeat(60)).bytes());
    }
    head.extend(b"\r\n");
    // The server may close before it has read all of this.
    let _ = huge.conn.write_all(&head).await;
    assert_eq!(huge.answer().await.status, 431);
    assert!(huge.closed().await);

    // A body over the limit (16 x max_message_size) gets an error.
    let mut big = connect(addr).await;
    let _ = big
        .conn
        .write_all(&post(ECHO, "application/proto", &vec![7u8; 64 * 1024]))
        .await;
    let a = big.answer().await;
    assert_eq!(a.status, 429);
    // A message over max_message_size (1 KiB) too.
    let mut over = connect(addr).await;
    over.conn
        .write_all(&post(ECHO, "application/proto", &vec![7u8; 2048]))
        .await
        .unwrap();
    let a = over.answer().await;
    assert_eq!(a.status, 429);
    assert!(String::from_utf8_lossy(&a.body).contains("too large"));

    // Through all of that, the other connection works as ever.
    good.conn
        .write_all(&post(ECHO, "application/proto", b"still here"))
        .await
        .unwrap();
    assert_eq!(good.answer().await.body, b"still here");
    drop(stalled);
}

#[tokio::test]
async fn connect_get_needs_a_side_effect_free_method() {
    let addr = start().await;
    let mut c = connect(addr).await;
    c.conn
        .write_all(b"GET /test.Web/Echo?encoding=proto&message=abc HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let a = c.answer().await;
    assert_eq!(a.status, 501);
}
