//! The standard gRPC interop client cases, run by tonic (a stock gRPC
//! client) against the tram interop server's gateway over loopback, on the
//! one port that also serves native tram clients in the same test.
#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use tonic::codec::CompressionEncoding;
use tonic::metadata::{BinaryMetadataValue, MetadataValue};
use tram::conn::{Listener, TcpConfig};

/// tonic's client of the interop service (generated into `OUT_DIR/tonic`).
mod pb {
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/tonic/grpc.testing.rs"));
}

use pb::test_service_client::TestServiceClient;
use pb::unimplemented_service_client::UnimplementedServiceClient;
use pb::*;

type Client = TestServiceClient<tonic::transport::Channel>;

async fn start() -> SocketAddr {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tram_examples::interop::server();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    addr
}

async fn channel(addr: SocketAddr) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn zeros(n: usize) -> Option<Payload> {
    Some(Payload {
        r#type: 0,
        body: vec![0u8; n].into(),
    })
}

fn params(sizes: &[i32]) -> Vec<ResponseParameters> {
    sizes
        .iter()
        .map(|&size| ResponseParameters {
            size,
            ..ResponseParameters::default()
        })
        .collect()
}

fn body_len(p: &Option<Payload>) -> usize {
    p.as_ref().map_or(0, |p| p.body.len())
}

async fn empty_unary(c: &mut Client) {
    c.empty_call(Empty {}).await.unwrap();
}

async fn large_unary(c: &mut Client) {
    let r = c
        .unary_call(SimpleRequest {
            response_size: 314_159,
            payload: zeros(271_828),
            ..SimpleRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(body_len(&r.get_ref().payload), 314_159);
}

async fn client_compressed_unary(ch: tonic::transport::Channel) {
    let mut c = TestServiceClient::new(ch).send_compressed(CompressionEncoding::Gzip);
    for expect in [true, false] {
        let r = c
            .unary_call(SimpleRequest {
                response_size: 314_159,
                payload: zeros(271_828),
                expect_compressed: Some(BoolValue { value: expect }),
                ..SimpleRequest::default()
            })
            .await
            .unwrap();
        assert_eq!(body_len(&r.get_ref().payload), 314_159);
    }
}

async fn server_compressed_unary(ch: tonic::transport::Channel) {
    let mut c = TestServiceClient::new(ch).accept_compressed(CompressionEncoding::Gzip);
    for compressed in [true, false] {
        let r = c
            .unary_call(SimpleRequest {
                response_size: 314_159,
                payload: zeros(271_828),
                response_compressed: Some(BoolValue { value: compressed }),
                ..SimpleRequest::default()
            })
            .await
            .unwrap();
        assert_eq!(body_len(&r.get_ref().payload), 314_159);
    }
}

async fn client_streaming(c: &mut Client) {
    let requests = [27_182, 8, 1_828, 45_904].map(|n| StreamingInputCallRequest {
        payload: zeros(n),
        ..StreamingInputCallRequest::default()
    });
    let r = c
        .streaming_input_call(tokio_stream::iter(requests))
        .await
        .unwrap();
    assert_eq!(r.get_ref().aggregated_payload_size, 74_922);
}

async fn server_streaming(c: &mut Client) {
    let sizes = [31_415, 9, 2_653, 58_979];
    let mut s = c
        .streaming_output_call(StreamingOutputCallRequest {
            response_parameters: params(&sizes),
            ..StreamingOutputCallRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    for size in sizes {
        let m = s.message().await.unwrap().unwrap();
        assert_eq!(body_len(&m.payload), size as usize);
    }
    assert!(s.message().await.unwrap().is_none());
}

async fn ping_pong(c: &mut Client) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let request = |(size, payload): (i32, usize)| StreamingOutputCallRequest {
        response_parameters: params(&[size]),
        payload: zeros(payload),
        ..StreamingOutputCallRequest::default()
    };
    let pairs = [(31_415, 27_182), (9, 8), (2_653, 1_828), (58_979, 45_904)];
    // tonic returns the call once the response headers are in, and a gRPC
    // server sends them with its first answer: the first request goes
    // before waiting (as tonic's own interop client does).
    tx.send(request(pairs[0])).await.unwrap();
    let mut responses = c
        .full_duplex_call(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    for (i, (size, payload)) in pairs.into_iter().enumerate() {
        if i > 0 {
            tx.send(request((size, payload))).await.unwrap();
        }
        let m = responses.message().await.unwrap().unwrap();
        assert_eq!(body_len(&m.payload), size as usize);
    }
    drop(tx);
    assert!(responses.message().await.unwrap().is_none());
}

async fn empty_stream(c: &mut Client) {
    let mut responses = c
        .full_duplex_call(tokio_stream::empty())
        .await
        .unwrap()
        .into_inner();
    assert!(responses.message().await.unwrap().is_none());
}

async fn custom_metadata(c: &mut Client) {
    let trailing = BinaryMetadataValue::from_bytes(&[0xab, 0xab, 0xab]);
    let mut req = tonic::Request::new(SimpleRequest {
        response_size: 314_159,
        payload: zeros(271_828),
        ..SimpleRequest::default()
    });
    req.metadata_mut().insert(
        "x-grpc-test-echo-initial",
        MetadataValue::from_static("test_initial_metadata_value"),
    );
    req.metadata_mut()
        .insert_bin("x-grpc-test-echo-trailing-bin", trailing.clone());
    // tonic returns the trailers of a unary call merged into the
    // response's metadata.
    let r = c.unary_call(req).await.unwrap();
    assert_eq!(body_len(&r.get_ref().payload), 314_159);
    assert_eq!(
        r.metadata().get_bin("x-grpc-test-echo-trailing-bin"),
        Some(&trailing)
    );
    assert_eq!(
        r.metadata().get("x-grpc-test-echo-initial").unwrap(),
        "test_initial_metadata_value"
    );
    // The same on a full-duplex call: the initial metadata in the response
    // headers (not the trailers), the trailing in the trailers.
    let mut req = tonic::Request::new(tokio_stream::iter([StreamingOutputCallRequest {
        response_parameters: params(&[314_159]),
        payload: zeros(271_828),
        ..StreamingOutputCallRequest::default()
    }]));
    req.metadata_mut().insert(
        "x-grpc-test-echo-initial",
        MetadataValue::from_static("test_initial_metadata_value"),
    );
    req.metadata_mut()
        .insert_bin("x-grpc-test-echo-trailing-bin", trailing.clone());
    let r = c.full_duplex_call(req).await.unwrap();
    assert_eq!(
        r.metadata().get("x-grpc-test-echo-initial").unwrap(),
        "test_initial_metadata_value",
        "initial metadata in the response headers"
    );
    let mut responses = r.into_inner();
    let m = responses.message().await.unwrap().unwrap();
    assert_eq!(body_len(&m.payload), 314_159);
    assert!(responses.message().await.unwrap().is_none());
    let trailers = responses.trailers().await.unwrap().unwrap();
    assert_eq!(
        trailers.get_bin("x-grpc-test-echo-trailing-bin"),
        Some(&trailing)
    );
}

async fn status_code_and_message(c: &mut Client, message: &str) {
    let status = EchoStatus {
        code: 2,
        message: message.to_owned(),
    };
    let err = c
        .unary_call(SimpleRequest {
            response_status: Some(status.clone()),
            ..SimpleRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unknown);
    assert_eq!(err.message(), message);
    // The same through a bidirectional stream.
    let request = StreamingOutputCallRequest {
        response_status: Some(status),
        ..StreamingOutputCallRequest::default()
    };
    // The call fails before any message: a trailers-only response, which
    // tonic reports as the call's own error (grpc-go, at the first Recv).
    let err = match c.full_duplex_call(tokio_stream::iter([request])).await {
        Err(e) => e,
        Ok(r) => r.into_inner().message().await.unwrap_err(),
    };
    assert_eq!(err.code(), tonic::Code::Unknown);
    assert_eq!(err.message(), message);
}

async fn unimplemented_method(c: &mut Client) {
    let err = c.unimplemented_call(Empty {}).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unimplemented);
}

async fn unimplemented_service(ch: tonic::transport::Channel) {
    let mut c = UnimplementedServiceClient::new(ch);
    let err = c.unimplemented_call(Empty {}).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unimplemented);
}

async fn cancel_after_begin(c: &mut Client) {
    // Start a client stream that never sends, then cancel it.
    let call = c.streaming_input_call(tokio_stream::pending::<StreamingInputCallRequest>());
    let outcome = tokio::time::timeout(Duration::from_millis(100), call).await;
    assert!(outcome.is_err(), "cancelled before the server could answer");
}

async fn cancel_after_first_response(c: &mut Client) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    // Sent before waiting for the call: see `ping_pong`.
    tx.send(StreamingOutputCallRequest {
        response_parameters: params(&[31_415]),
        payload: zeros(27_182),
        ..StreamingOutputCallRequest::default()
    })
    .await
    .unwrap();
    let mut responses = c
        .full_duplex_call(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let first = responses.message().await.unwrap().unwrap();
    assert_eq!(body_len(&first.payload), 31_415);
    // Cancel: drop both directions (tonic sends RST_STREAM CANCEL).
    drop(responses);
    drop(tx);
}

async fn timeout_on_sleeping_server(c: &mut Client) {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    req.set_timeout(Duration::from_millis(1));
    tx.send(StreamingOutputCallRequest {
        payload: zeros(27_182),
        ..StreamingOutputCallRequest::default()
    })
    .await
    .unwrap();
    let outcome = async {
        let mut responses = c.full_duplex_call(req).await?.into_inner();
        while responses.message().await?.is_some() {}
        Ok::<_, tonic::Status>(())
    }
    .await;
    let err = outcome.unwrap_err();
    // Whichever comes first: the server's DEADLINE_EXCEEDED, or tonic's
    // own timer for the same deadline, which it reports as CANCELLED
    // ("Timeout expired"); on a loaded machine the 1 ms can run out before
    // the server's answer is read. (The gateway's own deadline is checked
    // with a raw HTTP/2 client in crates/tram-grpc/tests/gateway.rs.)
    let tonic_timer = err.code() == tonic::Code::Cancelled && err.message() == "Timeout expired";
    assert!(
        err.code() == tonic::Code::DeadlineExceeded || tonic_timer,
        "{err:?}"
    );
    drop(tx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_interop_cases_through_the_gateway_and_native_tram_on_one_port() {
    let addr = start().await;
    let ch = channel(addr).await;
    let mut c = TestServiceClient::new(ch.clone());
    let guard = |what: &'static str| move |_| panic!("timed out: {what}");
    macro_rules! case {
        ($name:literal, $fut:expr) => {
            tokio::time::timeout(Duration::from_secs(20), $fut)
                .await
                .unwrap_or_else(guard($name));
        };
    }
    case!("empty_unary", empty_unary(&mut c));
    case!("large_unary", large_unary(&mut c));
    case!(
        "client_compressed_unary",
        client_compressed_unary(ch.clone())
    );
    case!(
        "server_compressed_unary",
        server_compressed_unary(ch.clone())
    );
    case!("client_streaming", client_streaming(&mut c));
    case!("server_streaming", server_streaming(&mut c));
    case!("ping_pong", ping_pong(&mut c));
    case!("empty_stream", empty_stream(&mut c));
    case!("custom_metadata", custom_metadata(&mut c));
    case!(
        "status_code_and_message",
        status_code_and_message(&mut c, "test status message")
    );
    case!(
        "special_status_message",
        status_code_and_message(
            &mut c,
            "\t\ntest with whitespace\r\nand Unicode BMP ☺ and non-BMP 😈\t\n"
        )
    );
    case!("unimplemented_method", unimplemented_method(&mut c));
    case!("unimplemented_service", unimplemented_service(ch.clone()));
    case!("cancel_after_begin", cancel_after_begin(&mut c));
    case!(
        "cancel_after_first_response",
        cancel_after_first_response(&mut c)
    );
    case!(
        "timeout_on_sleeping_server",
        timeout_on_sleeping_server(&mut c)
    );
    // The connection is still good after the cancellations.
    case!("empty_unary again", empty_unary(&mut c));

    // A native tram client on the same port, in the same test.
    use tram_examples::proto::interop::test_service_client::TestServiceClient as TramClient;
    let tram = TramClient::connect_lazy(addr.to_string());
    let r = tram
        .unary_call(tram_examples::proto::interop::SimpleRequest {
            response_size: 1_000,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.get_ref().payload.as_ref().unwrap().body.len(), 1_000);
    // custom_metadata, natively: the echo of the initial metadata comes
    // back as leading metadata, the trailing one as a trailer.
    let md = tram::rpc::Metadata::builder()
        .ascii("x-grpc-test-echo-initial", "test_initial_metadata_value")
        .unwrap()
        .binary("x-grpc-test-echo-trailing-bin", &[0xab, 0xab, 0xab])
        .unwrap()
        .build();
    let r = tram
        .unary_call(
            tram::rpc::Request::new(tram_examples::proto::interop::SimpleRequest {
                response_size: 10,
                ..Default::default()
            })
            .with_metadata(md),
        )
        .await
        .unwrap();
    assert_eq!(
        r.metadata().get("x-grpc-test-echo-initial"),
        Some(&b"test_initial_metadata_value"[..])
    );
    assert_eq!(r.trailers().get("x-grpc-test-echo-initial"), None);
    assert_eq!(
        r.trailers().get("x-grpc-test-echo-trailing-bin"),
        Some(&[0xab, 0xab, 0xab][..])
    );
}
