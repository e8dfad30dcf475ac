//! One TLS port, two protocols: a client that negotiates ALPN `h2` reaches
//! the gateway, a tram client the tram server.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use tram::conn::{Listener, TcpConfig};
use tram::tls::ClientTls;
use tram::tls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tram::tls::rustls::{self, RootCertStore};
use tram::{Channel, Server};
use tram_grpc::standard::add_standard_services;
use tram_grpc::standard::pb::health;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_h2_reaches_the_gateway_and_tram_the_server() {
    // A CA and a server certificate for localhost.
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let mut server_tls = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    server_tls.alpn_protocols = vec![b"h2".to_vec(), b"tram".to_vec()];
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let client_tls = |alpn: &[&[u8]]| {
        let mut c = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(c)
    };

    let (builder, _health) = add_standard_services(Server::builder(), &[]).unwrap();
    let server = tram_grpc::with_gateway(builder.tls(Arc::new(server_tls)).build());
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));

    // gRPC over TLS with ALPN h2: a health check through the gateway.
    let tcp = tram::conn::connect(addr, &TcpConfig::default())
        .await
        .unwrap();
    let tls = tram::tls::connect(client_tls(&[b"h2"]), "localhost", tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (client, conn) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(conn);
    let mut client = client.ready().await.unwrap();
    let req = http::Request::builder()
        .method("POST")
        .uri("https://localhost/grpc.health.v1.Health/Check")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut send) = client.send_request(req, false).unwrap();
    let msg = prost::Message::encode_to_vec(&health::HealthCheckRequest {
        service: String::new(),
    });
    let mut body = BytesMut::new();
    body.put_u8(0);
    body.put_u32(msg.len() as u32);
    body.put_slice(&msg);
    send.send_data(body.freeze(), true).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.status(), http::StatusCode::OK);
    let mut body = resp.into_body();
    let mut data = BytesMut::new();
    while let Some(chunk) = body.data().await {
        data.extend_from_slice(&chunk.unwrap());
    }
    let trailers = body.trailers().await.unwrap().unwrap();
    assert_eq!(trailers["grpc-status"], "0");
    let reply: health::HealthCheckResponse =
        prost::Message::decode(Bytes::from(data.split_off(5))).unwrap();
    assert_eq!(reply.status, 1, "SERVING");

    // tram over TLS (no ALPN) on the same port.
    let ch = Channel::builder(format!("localhost:{}", addr.port()))
        .tls(ClientTls::new(client_tls(&[])))
        .build();
    let r = health::health_client::HealthClient::new(ch)
        .check(health::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(r.get_ref().status, 1);
}
