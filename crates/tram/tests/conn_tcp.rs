//! Socket options over real loopback sockets: the congestion control a
//! [`TcpConfig`] names is the one the kernel runs, on connected sockets,
//! on those a listener accepts (bound by tram or wrapped), and an unknown
//! name fails the connect with the name in the error.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use tokio::net::TcpStream;
use tram::conn::{self, CongestionControl, Listener, TcpConfig};

/// The system's default congestion control.
fn system_default() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .unwrap()
        .trim()
        .to_string()
}

/// An algorithm any process may set that is not the system's default, so
/// that seeing it on a socket shows the option took: `reno` is built into
/// every kernel and always allowed; on a system whose default it is, any
/// other allowed one.
fn other_than_default() -> Option<CongestionControl> {
    let default = system_default();
    let allowed =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control").unwrap();
    std::iter::once("reno")
        .chain(allowed.split_whitespace())
        .find(|name| *name != default)
        .map(|name| CongestionControl::new(name).unwrap())
}

fn running(stream: &TcpStream) -> String {
    let name = socket2::SockRef::from(stream).tcp_congestion().unwrap();
    String::from_utf8_lossy(&name)
        .trim_end_matches('\0')
        .to_string()
}

fn config(cc: Option<CongestionControl>) -> TcpConfig {
    TcpConfig {
        congestion_control: cc,
        ..TcpConfig::default()
    }
}

async fn accept_one(listener: Listener) -> (SocketAddr, tokio::task::JoinHandle<TcpStream>) {
    let addr = listener.local_addr().unwrap();
    (
        addr,
        tokio::spawn(async move { listener.accept().await.unwrap().0 }),
    )
}

#[tokio::test]
async fn both_ends_run_the_configured_algorithm() {
    let Some(cc) = other_than_default() else {
        eprintln!("only one congestion control may be set here: nothing to tell apart");
        return;
    };
    let listener = Listener::bind("127.0.0.1:0", config(Some(cc)))
        .await
        .unwrap();
    let (addr, accepted) = accept_one(listener).await;
    let client = conn::connect(addr, &config(Some(cc))).await.unwrap();
    let server = accepted.await.unwrap();
    assert_eq!(running(&client), cc.as_str());
    assert_eq!(running(&server), cc.as_str(), "inherited from the listener");

    // Without the option, the system's default, at both ends.
    let listener = Listener::bind("127.0.0.1:0", config(None)).await.unwrap();
    let (addr, accepted) = accept_one(listener).await;
    let client = conn::connect(addr, &config(None)).await.unwrap();
    assert_eq!(running(&client), system_default());
    assert_eq!(running(&accepted.await.unwrap()), system_default());
}

#[tokio::test]
async fn a_wrapped_listener_sets_it_on_each_connection() {
    let Some(cc) = other_than_default() else {
        return;
    };
    let bound = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (addr, accepted) = accept_one(Listener::from_tokio(bound, config(Some(cc)))).await;
    let _client = TcpStream::connect(addr).await.unwrap();
    assert_eq!(running(&accepted.await.unwrap()), cc.as_str());
}

#[tokio::test]
async fn an_unknown_algorithm_fails_the_connect_and_names_itself() {
    let listener = Listener::bind("127.0.0.1:0", config(None)).await.unwrap();
    let (addr, _accepted) = accept_one(listener).await;
    let bogus = CongestionControl::new("no-such-cc").unwrap();
    let err = conn::connect(addr, &config(Some(bogus)))
        .await
        .expect_err("the kernel has no such algorithm");
    assert!(err.to_string().contains("no-such-cc"), "{err}");
    let err = Listener::bind("127.0.0.1:0", config(Some(bogus)))
        .await
        .expect_err("nor for a listener");
    assert!(err.to_string().contains("no-such-cc"), "{err}");
}
