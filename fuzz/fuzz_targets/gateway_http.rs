//! Drives the gateway (`tram_grpc::Gateway::serve_http`) with arbitrary
//! HTTP clients over an in-memory pipe, the clock paused: pipelined
//! HTTP/1.1 requests (Connect unary, streaming and GET, gRPC-Web binary
//! and text, anything else), or an HTTP/2 connection whose HEADERS, DATA
//! and control frames carry gRPC, gRPC-Web and Connect requests. The
//! requests are built from fields drawn from small sets, so that most reach
//! the gateway's own decoders rather than stop at hyper's or h2's; their
//! bodies are messages framed as their protocol asks, or raw bytes.
//! Checks: no panic (in any task); the connection finishes once the input
//! ends; what an HTTP/1.1 connection writes is HTTP/1.1 responses, and an
//! HTTP/2 one opens with its SETTINGS.
#![no_main]

mod common;

use std::net::SocketAddr;
use std::sync::LazyLock;
use std::time::Duration;

use arbitrary::Arbitrary;
use bytes::Bytes;
use common::{Count, Num};
use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use tram::rpc::{Request, Response, Server, Status, Streaming};
use tram_grpc::{Gateway, GatewayConfig};

/// The service's methods: name, client streaming, server streaming, free
/// of side effects (callable with GET).
const METHODS: [(&str, bool, bool, bool); 6] = [
    ("Unary", false, false, true),
    ("Sleep", false, false, false),
    ("Fail", false, false, false),
    ("Count", false, true, false),
    ("Sum", true, false, false),
    ("Chat", true, true, false),
];

static GATEWAY: LazyLock<Gateway> = LazyLock::new(|| {
    let server = Server::builder()
        .max_concurrent_calls(8)
        .unary("/f.S/Unary", |r: Request<Num>| async move {
            Ok(Response::new(r.into_inner()))
        })
        .unary("/f.S/Sleep", |r: Request<Num>| async move {
            tokio::time::sleep(Duration::from_millis(r.get_ref().n % 10_000)).await;
            Ok(Response::new(r.into_inner()))
        })
        .unary("/f.S/Fail", |r: Request<Num>| async move {
            let md = tram::Metadata::builder()
                .binary("x-why-bin", &[0, 255])
                .expect("valid")
                .build();
            Err::<Response<Num>, _>(
                Status::invalid_argument(format!("no {} ☹\r\n", r.get_ref().n)).with_trailers(md),
            )
        })
        .server_streaming("/f.S/Count", |r: Request<Num>| async move {
            Ok(Response::new(Count(r.get_ref().n % 100)))
        })
        .client_streaming("/f.S/Sum", |r: Request<Streaming<Num>>| async move {
            let mut s = r.into_inner();
            let mut sum = 0u64;
            while let Some(m) = s.message().await? {
                sum = sum.wrapping_add(m.n);
            }
            Ok(Response::new(Num { n: sum }))
        })
        .bidi_streaming("/f.S/Chat", |r: Request<Streaming<Num>>| async move {
            let mut s = r.into_inner();
            let mut n = 0;
            while s.message().await?.is_some() {
                n += 1;
            }
            Ok(Response::new(Count(n)))
        })
        .build();
    let config = GatewayConfig {
        max_message_size: 4096,
        compress_responses: true,
        cors_allow_origin: Some("*".into()),
        descriptors: vec![Bytes::from(descriptors())],
        ..GatewayConfig::default()
    };
    Gateway::new(server, config)
});

/// The service's `FileDescriptorSet`, for Connect's JSON and GET.
fn descriptors() -> Vec<u8> {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::*;
    let num = DescriptorProto {
        name: Some("Num".into()),
        field: vec![FieldDescriptorProto {
            name: Some("n".into()),
            number: Some(1),
            label: Some(Label::Optional as i32),
            r#type: Some(Type::Uint64 as i32),
            json_name: Some("n".into()),
            ..FieldDescriptorProto::default()
        }],
        ..DescriptorProto::default()
    };
    let method = |&(name, client, server, get): &(&str, bool, bool, bool)| MethodDescriptorProto {
        name: Some(name.into()),
        input_type: Some(".f.Num".into()),
        output_type: Some(".f.Num".into()),
        client_streaming: Some(client),
        server_streaming: Some(server),
        options: get.then(|| MethodOptions {
            idempotency_level: Some(1),
            ..MethodOptions::default()
        }),
        ..MethodDescriptorProto::default()
    };
    let file = FileDescriptorProto {
        name: Some("f.proto".into()),
        package: Some("f".into()),
        syntax: Some("proto3".into()),
        message_type: vec![num],
        service: vec![ServiceDescriptorProto {
            name: Some("S".into()),
            method: METHODS.iter().map(method).collect(),
            ..ServiceDescriptorProto::default()
        }],
        ..FileDescriptorProto::default()
    };
    FileDescriptorSet { file: vec![file] }.encode_to_vec()
}

const CONTENT_TYPES: [&str; 10] = [
    "application/proto",
    "application/json",
    "application/connect+proto",
    "application/connect+json",
    "application/grpc-web",
    "application/grpc-web-text+proto",
    "application/grpc",
    "application/grpc+proto",
    "application/json; charset=utf-8",
    "text/plain",
];

const HEADERS: [&str; 12] = [
    "grpc-timeout",
    "connect-timeout-ms",
    "content-encoding",
    "connect-content-encoding",
    "grpc-encoding",
    "accept-encoding",
    "grpc-accept-encoding",
    "connect-protocol-version",
    "origin",
    "x-meta",
    "x-meta-bin",
    "te",
];

const VALUES: [&str; 8] = [
    "gzip", "identity", "1", "100m", "5", "*", "trailers", "AAE=",
];

/// A path: one of the service's methods, or anything.
#[derive(Arbitrary, Debug)]
enum Path {
    Method(u8),
    Raw(String),
}

impl Path {
    fn render(&self) -> String {
        match self {
            Path::Method(m) => format!("/f.S/{}", METHODS[usize::from(*m) % METHODS.len()].0),
            // What a request line can carry, so that the request reaches
            // the gateway (hyper's own parser has fuzzers of its own).
            Path::Raw(s) => format!(
                "/{}",
                s.replace(|c: char| !c.is_ascii_graphic() || c == '#', "")
            ),
        }
    }
}

/// A header: a name and a value from the lists, or anything.
#[derive(Arbitrary, Debug)]
enum Header {
    Known { name: u8, value: u8 },
    Value { name: u8, value: String },
    Raw { name: String, value: String },
}

impl Header {
    fn render(&self) -> (String, String) {
        let pick = |i: &u8| HEADERS[usize::from(*i) % HEADERS.len()].to_owned();
        let (name, value) = match self {
            Header::Known { name, value } => (
                pick(name),
                VALUES[usize::from(*value) % VALUES.len()].to_owned(),
            ),
            Header::Value { name, value } => (pick(name), value.clone()),
            Header::Raw { name, value } => (name.to_ascii_lowercase(), value.clone()),
        };
        // A token for a name and visible ASCII for a value, as HTTP/1.1
        // and HPACK let through: the gateway sees the header.
        let mut name: String = name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if name.is_empty() {
            name.push('x');
        }
        let value: String = value.chars().filter(|c| matches!(c, ' '..='~')).collect();
        (name, value.trim().to_owned())
    }
}

/// A request body: messages framed as the content type asks, or bytes.
#[derive(Arbitrary, Debug)]
enum Body {
    Messages {
        nums: Vec<u64>,
        gzip: bool,
        end: bool,
    },
    Json(String),
    Raw(Vec<u8>),
}

impl Body {
    fn render(&self, content_type: &str) -> Vec<u8> {
        let Body::Messages { nums, gzip, end } = self else {
            return match self {
                Body::Json(s) => s.clone().into_bytes(),
                Body::Raw(b) => b.clone(),
                Body::Messages { .. } => unreachable!(),
            };
        };
        let json = content_type.contains("json");
        let one = |n: u64| -> Vec<u8> {
            if json {
                format!(r#"{{"n":"{n}"}}"#).into_bytes()
            } else {
                Num { n }.encode_to_vec()
            }
        };
        let framed = content_type.starts_with("application/connect")
            || content_type.starts_with("application/grpc");
        if !framed {
            return nums.first().map(|&n| one(n)).unwrap_or_default();
        }
        let mut out = Vec::new();
        for &n in nums {
            let msg = one(n);
            let (flag, data) = if *gzip {
                (1u8, gzip_bytes(&msg))
            } else {
                (0, msg)
            };
            out.push(flag);
            out.extend_from_slice(&(data.len() as u32).to_be_bytes());
            out.extend_from_slice(&data);
        }
        if *end && content_type.starts_with("application/connect") {
            out.extend_from_slice(&[2, 0, 0, 0, 2]);
            out.extend_from_slice(b"{}");
        }
        if content_type.contains("-text") {
            use base64::Engine as _;
            return base64::engine::general_purpose::STANDARD
                .encode(out)
                .into_bytes();
        }
        out
    }
}

fn gzip_bytes(data: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = enc.write_all(data);
    enc.finish().unwrap_or_default()
}

/// An HTTP request's parts, for either HTTP.
#[derive(Arbitrary, Debug)]
struct Call {
    method: u8,
    path: Path,
    /// For GET: `encoding=`, `base64=1`, `compression=gzip`, the message.
    query: Option<(bool, bool, bool, u64)>,
    content_type: Option<u8>,
    headers: Vec<Header>,
    body: Body,
}

impl Call {
    fn method(&self) -> &'static str {
        ["POST", "POST", "GET", "OPTIONS", "PUT"][usize::from(self.method) % 5]
    }

    fn content_type(&self) -> Option<&'static str> {
        self.content_type
            .map(|c| CONTENT_TYPES[usize::from(c) % CONTENT_TYPES.len()])
    }

    fn target(&self) -> String {
        let mut t = self.path.render();
        if let Some((json, b64, gzip, n)) = self.query {
            use base64::Engine as _;
            let msg = if json {
                format!(r#"{{"n":"{n}"}}"#).into_bytes()
            } else {
                Num { n }.encode_to_vec()
            };
            let msg = if gzip { gzip_bytes(&msg) } else { msg };
            let msg = if b64 {
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&msg)
            } else {
                msg.iter().map(|b| format!("%{b:02X}")).collect()
            };
            let encoding = if json { "json" } else { "proto" };
            let (b64, gzip) = (u8::from(b64), if gzip { "gzip" } else { "identity" });
            t.push_str(&format!(
                "?connect=v1&encoding={encoding}&base64={b64}&compression={gzip}&message={msg}"
            ));
        }
        t
    }

    fn body(&self) -> Vec<u8> {
        self.body.render(self.content_type().unwrap_or(""))
    }
}

/// One HTTP/1.1 request, with its body sent whole or chunked.
#[derive(Arbitrary, Debug)]
struct H1Request {
    call: Call,
    chunked: bool,
}

impl H1Request {
    fn render(&self, out: &mut Vec<u8>) {
        let c = &self.call;
        out.extend_from_slice(
            format!("{} {} HTTP/1.1\r\nhost: f\r\n", c.method(), c.target()).as_bytes(),
        );
        if let Some(ct) = c.content_type() {
            out.extend_from_slice(format!("content-type: {ct}\r\n").as_bytes());
        }
        for h in &c.headers {
            let (name, value) = h.render();
            out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        let body = c.body();
        if self.chunked {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
            for piece in body.chunks(7) {
                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        } else {
            out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
            out.extend_from_slice(&body);
        }
    }
}

/// An HTTP/2 frame from the client: a request's HEADERS and DATA on a
/// stream, or control frames, or bytes.
#[derive(Arbitrary, Debug)]
enum H2Step {
    Request {
        stream: u8,
        call: Call,
        end_stream: bool,
        data_frames: u8,
    },
    Data {
        stream: u8,
        data: Vec<u8>,
        end_stream: bool,
    },
    Reset {
        stream: u8,
        code: u8,
    },
    WindowUpdate {
        stream: u8,
        n: u32,
    },
    Ping,
    Settings,
    GoAway,
    Raw(Vec<u8>),
}

fn h2_frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
}

/// An HPACK integer with a 7-bit prefix (RFC 7541 §5.1).
fn hpack_len(out: &mut Vec<u8>, mut n: usize) {
    if n < 127 {
        out.push(n as u8);
        return;
    }
    out.push(127);
    n -= 127;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

/// A header as a literal without indexing, no Huffman (RFC 7541 §6.2.2).
fn hpack_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0);
    hpack_len(out, name.len());
    out.extend_from_slice(name.as_bytes());
    hpack_len(out, value.len());
    out.extend_from_slice(value.as_bytes());
}

fn stream_id(s: u8) -> u32 {
    u32::from(s % 16) * 2 + 1
}

impl H2Step {
    fn render(&self, out: &mut Vec<u8>) {
        match self {
            H2Step::Request {
                stream,
                call,
                end_stream,
                data_frames,
            } => {
                let id = stream_id(*stream);
                let mut block = Vec::new();
                hpack_literal(&mut block, ":method", call.method());
                hpack_literal(&mut block, ":scheme", "http");
                hpack_literal(&mut block, ":path", &call.target());
                hpack_literal(&mut block, ":authority", "f");
                if let Some(ct) = call.content_type() {
                    hpack_literal(&mut block, "content-type", ct);
                }
                for h in &call.headers {
                    let (name, value) = h.render();
                    hpack_literal(&mut block, &name, &value);
                }
                let body = call.body();
                let no_body = body.is_empty() && *end_stream;
                // END_HEADERS, and END_STREAM when there is nothing else.
                h2_frame(out, 1, 0x4 | u8::from(no_body), id, &block);
                if no_body {
                    return;
                }
                let n = usize::from(*data_frames % 4) + 1;
                let size = body.len().div_ceil(n).max(1);
                let pieces: Vec<&[u8]> = if body.is_empty() {
                    vec![&[]]
                } else {
                    body.chunks(size).collect()
                };
                let last = pieces.len() - 1;
                for (i, piece) in pieces.into_iter().enumerate() {
                    let end = i == last && *end_stream;
                    h2_frame(out, 0, u8::from(end), id, piece);
                }
            }
            H2Step::Data {
                stream,
                data,
                end_stream,
            } => {
                h2_frame(out, 0, u8::from(*end_stream), stream_id(*stream), data);
            }
            H2Step::Reset { stream, code } => {
                h2_frame(
                    out,
                    3,
                    0,
                    stream_id(*stream),
                    &u32::from(*code % 14).to_be_bytes(),
                );
            }
            H2Step::WindowUpdate { stream, n } => {
                let s = if *stream % 3 == 0 {
                    0
                } else {
                    stream_id(*stream)
                };
                h2_frame(out, 8, 0, s, &(n & 0x7fff_ffff).to_be_bytes());
            }
            H2Step::Ping => h2_frame(out, 6, 0, 0, &[7; 8]),
            H2Step::Settings => h2_frame(out, 4, 0, 0, &[]),
            H2Step::GoAway => h2_frame(out, 7, 0, 0, &[0; 8]),
            H2Step::Raw(bytes) => out.extend_from_slice(bytes),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Input {
    Http1(Vec<H1Request>, Vec<u8>),
    Http2 { preface: bool, steps: Vec<H2Step> },
}

/// The HTTP/2 client preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fuzz_target!(|input: Input| {
    let mut bytes = Vec::new();
    let h2 = match &input {
        Input::Http1(requests, tail) => {
            for r in requests {
                r.render(&mut bytes);
            }
            bytes.extend_from_slice(tail);
            false
        }
        Input::Http2 { preface, steps } => {
            if *preface {
                bytes.extend_from_slice(PREFACE);
                h2_frame(&mut bytes, 4, 0, 0, &[]);
            }
            for s in steps {
                s.render(&mut bytes);
            }
            *preface
        }
    };
    let rt = common::paused_runtime();
    rt.block_on(async move {
        let (mut client, server_io) = tokio::io::duplex(64 * 1024);
        let peer = SocketAddr::from(([127, 0, 0, 1], 1));
        let serve = tokio::spawn(async move { GATEWAY.serve_http(server_io, peer).await });
        let out = common::exchange(&mut client, &bytes).await;
        tokio::time::timeout(Duration::from_secs(24 * 3600), serve)
            .await
            .expect("the connection finishes after the input ends")
            .expect("no panic");
        if h2 {
            // The server's preface: a SETTINGS frame first.
            assert!(
                out.len() >= 9 && out[3] == 4,
                "HTTP/2 output opens with SETTINGS"
            );
        } else if !bytes.starts_with(b"PRI ") && !out.is_empty() {
            assert!(
                out.starts_with(b"HTTP/1.1 "),
                "HTTP/1.1 output is responses"
            );
        }
    });
});
