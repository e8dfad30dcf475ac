//! The gRPC interop test service (`grpc.testing.TestService`) on tram: a
//! tram server whose gRPC gateway standard gRPC clients run the interop
//! cases against (`tests/interop.rs` does so with tonic).
//!
//! Behaviour follows the interop spec: `UnaryCall` answers with a payload of
//! `response_size` zero bytes and, when `response_status` is set, fails
//! with that code and message; streaming calls send one response per
//! `ResponseParameters` (after `interval_us`); `StreamingInputCall` sums
//! its request payload sizes; `x-grpc-test-echo-initial` is echoed as
//! leading metadata (response headers) and `x-grpc-test-echo-trailing-bin`
//! as a trailer.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tram::rpc::{Code, Metadata, Request, Response, Server, Status, Streaming};

use crate::proto::interop::{
    EchoStatus, Empty, Payload, ResponseParameters, SimpleRequest, SimpleResponse,
    StreamingInputCallRequest, StreamingInputCallResponse, StreamingOutputCallRequest,
    StreamingOutputCallResponse, test_service_server,
};

/// The service.
#[derive(Debug, Default, Clone, Copy)]
pub struct TestService;

/// A stream of responses fed by a task.
pub struct Responses(mpsc::Receiver<Result<StreamingOutputCallResponse, Status>>);

impl futures_core::Stream for Responses {
    type Item = Result<StreamingOutputCallResponse, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

fn payload(size: i32) -> Payload {
    Payload {
        r#type: 0,
        body: Bytes::from(vec![0u8; size.max(0) as usize]),
    }
}

/// The status a request asked for, if any (code 0 is OK).
fn requested(status: Option<&EchoStatus>) -> Option<Status> {
    let s = status.filter(|s| s.code != 0)?;
    let code = Code::from_u64(s.code as u64).unwrap_or(Code::Unknown);
    Some(Status::new(code, s.message.clone()))
}

/// The echo metadata the interop cases send: (leading, trailing).
fn echoed(md: &Metadata) -> (Metadata, Metadata) {
    let mut leading = Metadata::builder();
    if let Some(Ok(v)) = md.get("x-grpc-test-echo-initial").map(std::str::from_utf8) {
        let _ = leading.ascii("x-grpc-test-echo-initial", v);
    }
    let mut trailing = Metadata::builder();
    if let Some(v) = md.get("x-grpc-test-echo-trailing-bin") {
        let _ = trailing.binary("x-grpc-test-echo-trailing-bin", v);
    }
    (leading.build(), trailing.build())
}

/// Sends one response per parameter, honouring `interval_us`.
async fn stream_out(
    tx: &mpsc::Sender<Result<StreamingOutputCallResponse, Status>>,
    params: &[ResponseParameters],
) -> bool {
    for p in params {
        if p.interval_us > 0 {
            tokio::time::sleep(Duration::from_micros(p.interval_us as u64)).await;
        }
        let msg = StreamingOutputCallResponse {
            payload: Some(payload(p.size)),
        };
        if tx.send(Ok(msg)).await.is_err() {
            return false;
        }
    }
    true
}

impl test_service_server::TestService for TestService {
    async fn empty_call(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        Ok(Response::new(Empty {}))
    }

    async fn unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        let (leading, trailers) = echoed(request.metadata());
        let req = request.into_inner();
        if let Some(status) = requested(req.response_status.as_ref()) {
            return Err(status.with_trailers(trailers));
        }
        let (server_id, hostname) = if req.fill_server_id {
            let host = hostname();
            (format!("tram-interop@{host}/{}", std::process::id()), host)
        } else {
            (String::new(), String::new())
        };
        let resp = SimpleResponse {
            payload: Some(payload(req.response_size)),
            server_id,
            hostname,
            ..SimpleResponse::default()
        };
        Ok(Response::new(resp)
            .with_metadata(leading)
            .with_trailers(trailers))
    }

    async fn cacheable_unary_call(
        &self,
        request: Request<SimpleRequest>,
    ) -> Result<Response<SimpleResponse>, Status> {
        self.unary_call(request).await
    }

    type StreamingOutputCallStream = Responses;

    async fn streaming_output_call(
        &self,
        request: Request<StreamingOutputCallRequest>,
    ) -> Result<Response<Responses>, Status> {
        let req = request.into_inner();
        if let Some(status) = requested(req.response_status.as_ref()) {
            return Err(status);
        }
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            stream_out(&tx, &req.response_parameters).await;
        });
        Ok(Response::new(Responses(rx)))
    }

    async fn streaming_input_call(
        &self,
        request: Request<Streaming<StreamingInputCallRequest>>,
    ) -> Result<Response<StreamingInputCallResponse>, Status> {
        let mut requests = request.into_inner();
        let mut size = 0usize;
        while let Some(r) = requests.message().await? {
            size += r.payload.map_or(0, |p| p.body.len());
        }
        Ok(Response::new(StreamingInputCallResponse {
            aggregated_payload_size: size as i32,
        }))
    }

    type FullDuplexCallStream = Responses;

    async fn full_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let (leading, trailers) = echoed(request.metadata());
        let mut requests = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                match requests.message().await {
                    Ok(Some(req)) => {
                        if let Some(status) = requested(req.response_status.as_ref()) {
                            let _ = tx.send(Err(status)).await;
                            return;
                        }
                        if !stream_out(&tx, &req.response_parameters).await {
                            return;
                        }
                    }
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Responses(rx))
            .with_metadata(leading)
            .with_trailers(trailers))
    }

    type HalfDuplexCallStream = Responses;

    async fn half_duplex_call(
        &self,
        request: Request<Streaming<StreamingOutputCallRequest>>,
    ) -> Result<Response<Responses>, Status> {
        // Every request first, then every response.
        let mut requests = request.into_inner();
        let mut all = Vec::new();
        while let Some(r) = requests.message().await? {
            all.extend(r.response_parameters);
        }
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            stream_out(&tx, &all).await;
        });
        Ok(Response::new(Responses(rx)))
    }

    async fn unimplemented_call(&self, _: Request<Empty>) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented(
            "UnimplementedCall is unimplemented, as the spec says",
        ))
    }
}

/// This machine's name, as the interop cases that ask for it expect.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// The interop server: `TestService` (`UnimplementedService` is left out,
/// so calls to it get `UNIMPLEMENTED`), reflection and health, with tram's
/// gateway (gRPC, Connect with JSON, gRPC-Web) on the same port.
pub fn server() -> Server {
    let builder =
        Server::builder().add_service(test_service_server::TestServiceServer::new(TestService));
    let (builder, _health) = tram_grpc::standard::add_standard_services(
        builder,
        &[tram::include_file_descriptor_set!()],
    )
    .expect("the descriptors tram-build wrote decode");
    let server = builder.build();
    tram_grpc::with_gateway_config(
        server,
        tram_grpc::GatewayConfig {
            compress_responses: true,
            ..tram_grpc::GatewayConfig::default()
        }
        // Connect's JSON, for curl and browsers.
        .with_descriptors(&[tram::include_file_descriptor_set!()]),
    )
}
