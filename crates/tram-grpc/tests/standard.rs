//! Reflection and health through the gateway, called by a stock gRPC client
//! (tonic's generic client with prost messages), and health natively over
//! tram on the same port.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;
use tram::conn::{Listener, TcpConfig};
use tram::rpc::Server;
use tram_grpc::standard::pb::health::health_check_response::ServingStatus;
use tram_grpc::standard::pb::{health, reflection_v1, reflection_v1alpha};
use tram_grpc::standard::{HealthReporter, add_standard_services};

async fn start() -> (SocketAddr, HealthReporter) {
    let (builder, health) = add_standard_services(Server::builder(), &[]).unwrap();
    let server = tram_grpc::with_gateway(builder.build());
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    (addr, health)
}

async fn grpc(addr: SocketAddr) -> tonic::client::Grpc<tonic::transport::Channel> {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(ch)
}

async fn unary<Req, Resp>(
    g: &mut tonic::client::Grpc<tonic::transport::Channel>,
    path: &'static str,
    req: Req,
) -> Result<Resp, tonic::Status>
where
    Req: Message + Send + Sync + 'static,
    Resp: Message + Default + Send + Sync + 'static,
{
    g.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    Ok(g.unary(
        tonic::Request::new(req),
        PathAndQuery::from_static(path),
        codec,
    )
    .await?
    .into_inner())
}

async fn reflect<Req, Resp>(
    g: &mut tonic::client::Grpc<tonic::transport::Channel>,
    path: &'static str,
    reqs: Vec<Req>,
) -> Vec<Resp>
where
    Req: Message + Send + Sync + 'static,
    Resp: Message + Default + Send + Sync + 'static,
{
    g.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    let n = reqs.len();
    let mut stream = g
        .streaming(
            tonic::Request::new(tokio_stream::iter(reqs)),
            PathAndQuery::from_static(path),
            codec,
        )
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(m) = stream.message().await.unwrap() {
        out.push(m);
    }
    assert_eq!(out.len(), n, "one answer per request");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_services_and_serves_descriptors() {
    use reflection_v1::server_reflection_request::MessageRequest as Q;
    use reflection_v1::server_reflection_response::MessageResponse as A;
    let (addr, _health) = start().await;
    let mut g = grpc(addr).await;
    let req = |q: Q| reflection_v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(q),
    };
    let answers: Vec<reflection_v1::ServerReflectionResponse> = reflect(
        &mut g,
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        vec![
            req(Q::ListServices(String::new())),
            req(Q::FileContainingSymbol("grpc.health.v1.Health".into())),
            req(Q::FileContainingSymbol(
                "grpc.health.v1.HealthCheckResponse.ServingStatus".into(),
            )),
            req(Q::FileByFilename(
                "grpc/reflection/v1/reflection.proto".into(),
            )),
            req(Q::FileContainingSymbol("no.Such".into())),
        ],
    )
    .await;
    let Some(A::ListServicesResponse(list)) = &answers[0].message_response else {
        panic!("{:?}", answers[0])
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"
        ]
    );
    for (i, file) in [
        (1, "grpc/health/v1/health.proto"),
        (2, "grpc/health/v1/health.proto"),
        (3, "grpc/reflection/v1/reflection.proto"),
    ] {
        let Some(A::FileDescriptorResponse(f)) = &answers[i].message_response else {
            panic!("{:?}", answers[i])
        };
        let fd = prost_types::FileDescriptorProto::decode(&f.file_descriptor_proto[0][..]).unwrap();
        assert_eq!(fd.name(), file);
    }
    let Some(A::ErrorResponse(e)) = &answers[4].message_response else {
        panic!("{:?}", answers[4])
    };
    assert_eq!(e.error_code, tonic::Code::NotFound as i32);

    // v1alpha answers the same way.
    use reflection_v1alpha::server_reflection_request::MessageRequest as Qa;
    use reflection_v1alpha::server_reflection_response::MessageResponse as Aa;
    let answers: Vec<reflection_v1alpha::ServerReflectionResponse> = reflect(
        &mut g,
        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
        vec![reflection_v1alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(Qa::ListServices(String::new())),
        }],
    )
    .await;
    assert!(
        matches!(&answers[0].message_response, Some(Aa::ListServicesResponse(l)) if l.service.len() == 3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_and_watch() {
    let (addr, health) = start().await;
    let mut g = grpc(addr).await;
    let check = |service: &str| health::HealthCheckRequest {
        service: service.into(),
    };
    let r: health::HealthCheckResponse = unary(&mut g, "/grpc.health.v1.Health/Check", check(""))
        .await
        .unwrap();
    assert_eq!(r.status, ServingStatus::Serving as i32);
    let err = unary::<_, health::HealthCheckResponse>(
        &mut g,
        "/grpc.health.v1.Health/Check",
        check("nope"),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound);

    // Watch: the current status, then each change.
    g.ready().await.unwrap();
    let codec =
        tonic_prost::ProstCodec::<health::HealthCheckRequest, health::HealthCheckResponse>::default(
        );
    let mut watch = g
        .server_streaming(
            tonic::Request::new(check("grpc.health.v1.Health")),
            PathAndQuery::from_static("/grpc.health.v1.Health/Watch"),
            codec,
        )
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut watch).await.status, ServingStatus::Serving as i32);
    health.set_not_serving("grpc.health.v1.Health");
    assert_eq!(
        next(&mut watch).await.status,
        ServingStatus::NotServing as i32
    );

    // Natively over tram, on the same port.
    let tram = health::health_client::HealthClient::connect_lazy(addr.to_string());
    let r = tram.check(check("grpc.health.v1.Health")).await.unwrap();
    assert_eq!(r.get_ref().status, ServingStatus::NotServing as i32);
}

async fn next(
    w: &mut tonic::codec::Streaming<health::HealthCheckResponse>,
) -> health::HealthCheckResponse {
    tokio::time::timeout(Duration::from_secs(5), w.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_not_serving_while_the_server_drains() {
    let (builder, _health) = add_standard_services(Server::builder(), &[]).unwrap();
    let server = builder.drain_timeout(Duration::from_secs(2)).build();
    let draining = server.draining();
    assert!(!draining.is_draining());
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(server.serve_listener(listener, async move {
        let _ = stopped.await;
    }));

    let client = health::health_client::HealthClient::connect_lazy(addr.to_string());
    let mut watch = client
        .watch(health::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), watch.message()).await;
    assert_eq!(
        first.unwrap().unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    // Shutdown begins; the watch (a call in flight) hears of it.
    stop.send(()).unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), watch.message()).await;
    assert_eq!(
        next.unwrap().unwrap().unwrap().status,
        ServingStatus::NotServing as i32
    );
    assert!(draining.is_draining());
    drop(watch);
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
