//! Mutual TLS with a generated service: a CA, a server certificate and two
//! client certificates are made at start (rcgen); the server admits only
//! clients whose certificate its CA signed, and its interceptor admits only
//! one of them, by certificate.
//!
//! `cargo run -p tram-examples --bin tls-echo`

use std::sync::Arc;

use bytes::Bytes;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use tram::conn::{Listener, TcpConfig};
use tram::tls::ClientTls;
use tram::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tram::tls::rustls::server::WebPkiClientVerifier;
use tram::tls::rustls::{self, RootCertStore};
use tram::{Channel, Request, Response, Server, Status};
use tram_examples::proto::echo::{EchoMessage, echo_client::EchoClient, echo_server};

struct Echo;

impl echo_server::Echo for Echo {
    async fn say(&self, request: Request<EchoMessage>) -> Result<Response<EchoMessage>, Status> {
        Ok(Response::new(request.into_inner()))
    }
}

/// A certificate and its key.
struct Identity {
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

fn issue(
    ca: &rcgen::Certificate,
    ca_key: &KeyPair,
    names: &[&str],
    cn: &str,
) -> anyhow::Result<Identity> {
    let key = KeyPair::generate()?;
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
    params.distinguished_name.push(DnType::CommonName, cn);
    let cert = params.signed_by(&key, ca, ca_key)?;
    Ok(Identity {
        cert: cert.der().clone(),
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());

    // One CA signs everything here; production would keep separate ones.
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "example CA");
    let ca = ca_params.self_signed(&ca_key)?;
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone())?;
    let roots = Arc::new(roots);
    let server_id = issue(&ca, &ca_key, &["localhost"], "echo server")?;
    let alice = issue(&ca, &ca_key, &[], "alice")?;
    let mallory = issue(&ca, &ca_key, &[], "mallory")?;

    // The server: TLS with client certificates required, and an
    // interceptor that admits alice's certificate only.
    let verifier =
        WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone()).build()?;
    let server_tls = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![server_id.cert], server_id.key)?;
    let admitted = alice.cert.clone();
    let server = Server::builder()
        .tls(Arc::new(server_tls))
        .interceptor(
            move |call| match call.peer_certificates.and_then(|c| c.first()) {
                Some(leaf) if leaf[..] == admitted[..] => Ok(()),
                Some(_) => Err(Status::permission_denied("certificate not admitted")),
                None => Err(Status::unauthenticated("client certificate required")),
            },
        )
        .add_service(echo_server::EchoServer::new(Echo))
        .build();
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default()).await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));

    for (name, id) in [("alice", alice), ("mallory", mallory)] {
        let client_tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots.clone())
            .with_client_auth_cert(vec![id.cert], id.key)?;
        let channel = Channel::builder(format!("localhost:{port}"))
            .tls(ClientTls::new(Arc::new(client_tls)))
            .build();
        let client = EchoClient::new(channel);
        let reply = client
            .say(EchoMessage {
                id: 1,
                payload: Bytes::from(format!("hello from {name}")),
            })
            .await;
        match reply {
            Ok(r) => println!("{name}: echoed {:?}", r.get_ref().payload),
            Err(status) => println!("{name}: refused: {status}"),
        }
    }
    Ok(())
}
