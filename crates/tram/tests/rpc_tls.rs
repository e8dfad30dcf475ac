//! TLS and mutual TLS over real loopback TCP, with certificates made at
//! test time (rcgen): RPC with client certificates reaching interceptors,
//! refused handshakes, plain clients against a TLS server, and a message
//! stream over TLS.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use support::within;
use tokio::sync::{mpsc, oneshot};
use tram::conn::{Config, Connection, LengthDelimited, Listener, Split, TcpConfig};
use tram::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tram::tls::rustls::server::WebPkiClientVerifier;
use tram::tls::rustls::{self, RootCertStore};
use tram::tls::{self, ClientTls};
use tram::{Channel, Code, Request, Response, Server, Status};

#[derive(Clone, PartialEq, prost::Message)]
struct Echo {
    #[prost(uint64, tag = "1")]
    id: u64,
}

const SAY: &str = "/test.Echo/Say";

/// A CA and certificates it signed.
struct Pki {
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

struct Issued {
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let ca = params.self_signed(&ca_key).unwrap();
        Pki { ca, ca_key }
    }

    fn issue(&self, names: &[&str], common_name: &str) -> Issued {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        Issued {
            cert: cert.der().clone(),
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        }
    }

    fn roots(&self) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        Arc::new(roots)
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server config that requires client certificates from `clients`' CA.
fn server_config(server: &Issued, clients: &Pki) -> Arc<rustls::ServerConfig> {
    let verifier = WebPkiClientVerifier::builder_with_provider(clients.roots(), provider())
        .build()
        .unwrap();
    Arc::new(
        rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![server.cert.clone()], server.key.clone_key())
            .unwrap(),
    )
}

fn client_config(trust: &Pki, identity: Option<&Issued>) -> Arc<rustls::ClientConfig> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(trust.roots());
    Arc::new(match identity {
        Some(id) => builder
            .with_client_auth_cert(vec![id.cert.clone()], id.key.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    })
}

/// Starts a TLS echo server whose interceptor admits only the client
/// certificate `admitted`, and reports each call's peer leaf certificate.
async fn start(
    config: Arc<rustls::ServerConfig>,
    admitted: CertificateDer<'static>,
) -> (
    SocketAddr,
    oneshot::Sender<()>,
    mpsc::UnboundedReceiver<Bytes>,
) {
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let server = Server::builder()
        .tls(config)
        .interceptor(move |call| {
            let leaf = call
                .peer_certificates
                .and_then(|c| c.first())
                .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
            let _ = seen_tx.send(leaf.clone());
            if leaf[..] != admitted[..] {
                return Err(Status::permission_denied("certificate not admitted"));
            }
            Ok(())
        })
        .unary(SAY, |req: Request<Echo>| async move {
            Ok(Response::new(req.into_inner()))
        })
        .build();
    let (addr, stop, _task) = support::serve(server).await;
    (addr, stop, seen)
}

fn channel(addr: SocketAddr, tls: Option<Arc<rustls::ClientConfig>>) -> Channel {
    let builder = Channel::builder(format!("localhost:{}", addr.port()));
    match tls {
        Some(tls) => builder.tls(ClientTls::new(tls)).build(),
        None => builder.build(),
    }
}

async fn say(ch: &Channel) -> Result<u64, Status> {
    let r: Response<Echo> = within(
        10,
        "a TLS call",
        ch.unary(SAY, Request::new(Echo { id: 4 })),
    )
    .await?;
    Ok(r.get_ref().id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_calls_and_certificate_identity() {
    let server_ca = Pki::new("server CA");
    let client_ca = Pki::new("client CA");
    let server = server_ca.issue(&["localhost"], "tram test server");
    let alice = client_ca.issue(&[], "alice");
    let bob = client_ca.issue(&[], "bob");
    let (addr, _stop, mut seen) =
        start(server_config(&server, &client_ca), alice.cert.clone()).await;

    // Alice: TLS, her certificate verified and admitted by the interceptor.
    let ch = channel(addr, Some(client_config(&server_ca, Some(&alice))));
    assert_eq!(say(&ch).await.unwrap(), 4);
    assert_eq!(seen.recv().await.unwrap()[..], alice.cert[..]);

    // Bob: a valid certificate, refused by the interceptor.
    let ch = channel(addr, Some(client_config(&server_ca, Some(&bob))));
    assert_eq!(say(&ch).await.unwrap_err().code(), Code::PermissionDenied);
    assert_eq!(seen.recv().await.unwrap()[..], bob.cert[..]);

    // No client certificate: the handshake fails, the call is unavailable.
    let ch = channel(addr, Some(client_config(&server_ca, None)));
    assert_eq!(say(&ch).await.unwrap_err().code(), Code::Unavailable);

    // A client that does not trust the server's CA refuses to talk.
    let ch = channel(addr, Some(client_config(&client_ca, Some(&alice))));
    assert_eq!(say(&ch).await.unwrap_err().code(), Code::Unavailable);

    // A plain-TCP client gets a TLS alert where the preface should be: its
    // connection attempt fails, saying so; it harms nobody.
    let ch = channel(addr, None);
    let e = say(&ch).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("not a tram connection"), "{e:?}");
    let ch = channel(addr, Some(client_config(&server_ca, Some(&alice))));
    assert_eq!(say(&ch).await.unwrap(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_stream_over_tls() {
    let ca = Pki::new("CA");
    let server = ca.issue(&["localhost"], "server");
    let server_config = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![server.cert.clone()], server.key.clone_key())
            .unwrap(),
    );
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let stream = tls::accept(server_config, tcp).await.unwrap();
        let (mut inbound, sender) =
            Connection::new(Split(stream), LengthDelimited::new(), Config::default()).into_split();
        while let Some(Ok(m)) = inbound.recv().await {
            sender.send(m).await.unwrap();
        }
    });
    let tcp = tram::conn::connect(addr, &TcpConfig::default())
        .await
        .unwrap();
    let stream = tls::connect(client_config(&ca, None), "localhost", tcp)
        .await
        .unwrap();
    let (mut inbound, sender) =
        Connection::new(Split(stream), LengthDelimited::new(), Config::default()).into_split();
    for i in 0..100u32 {
        sender.send(Bytes::from(i.to_string())).await.unwrap();
    }
    for i in 0..100u32 {
        let m = within(10, "an echo over TLS", inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m, Bytes::from(i.to_string()));
    }
}
