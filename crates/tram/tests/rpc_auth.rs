//! Interceptors over real loopback TCP: a server that authenticates bearer
//! tokens and authorises per method, clients that attach the token to every
//! call.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use support::within;
use tokio::sync::oneshot;
use tram::{CallInfo, Channel, Code, Metadata, Request, Response, Server, Status};

#[derive(Clone, PartialEq, prost::Message)]
struct Echo {
    #[prost(uint64, tag = "1")]
    id: u64,
}

const SAY: &str = "/test.Echo/Say";
const ADMIN: &str = "/test.Admin/Reset";

/// Who may call what: "reader" may call Say, "admin" anything.
fn authorise(call: &CallInfo<'_>) -> Result<(), Status> {
    let token = call
        .metadata
        .get("authorization")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| Status::unauthenticated("a bearer token is required"))?;
    let role = match token {
        "reader-token" => "reader",
        "admin-token" => "admin",
        _ => return Err(Status::unauthenticated("unknown token")),
    };
    if call.method == ADMIN && role != "admin" {
        return Err(Status::permission_denied(format!(
            "{role} may not call {}",
            call.method
        )));
    }
    assert!(call.peer.ip().is_loopback());
    Ok(())
}

async fn start() -> (SocketAddr, oneshot::Sender<()>) {
    let server = Server::builder()
        .interceptor(authorise)
        .unary(SAY, |req: Request<Echo>| async move {
            // The handler sees the metadata the interceptor checked.
            assert!(req.metadata().get("authorization").is_some());
            Ok(Response::new(req.into_inner()))
        })
        .unary(ADMIN, |req: Request<Echo>| async move {
            Ok(Response::new(req.into_inner()))
        })
        .build();
    let (addr, stop, _task) = support::serve(server).await;
    (addr, stop)
}

fn channel(addr: SocketAddr, token: Option<&str>) -> Channel {
    let builder = Channel::builder(addr.to_string());
    match token {
        Some(t) => builder
            .header("authorization", &format!("Bearer {t}"))
            .unwrap()
            .build(),
        None => builder.build(),
    }
}

async fn call(ch: &Channel, method: &str) -> Result<u64, Status> {
    let r: Response<Echo> =
        within(5, "a call", ch.unary(method, Request::new(Echo { id: 3 }))).await?;
    Ok(r.get_ref().id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_authenticate_and_roles_authorise() {
    let (addr, _stop) = start().await;
    let anonymous = channel(addr, None);
    let reader = channel(addr, Some("reader-token"));
    let admin = channel(addr, Some("admin-token"));
    let forged = channel(addr, Some("forged"));

    assert_eq!(
        call(&anonymous, SAY).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    assert_eq!(
        call(&forged, SAY).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    assert_eq!(call(&reader, SAY).await.unwrap(), 3);
    let denied = call(&reader, ADMIN).await.unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    assert!(
        denied.message().contains("reader may not call"),
        "{denied:?}"
    );
    assert_eq!(call(&admin, ADMIN).await.unwrap(), 3);
    // A refused call does not harm the connection: the next one works.
    assert_eq!(call(&reader, SAY).await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_interceptors_keep_the_callers_metadata_and_can_refuse() {
    let (addr, _stop) = start().await;
    // Caller metadata and interceptor metadata both arrive.
    let ch = channel(addr, Some("reader-token"));
    let md = Metadata::builder().ascii("x-trace", "abc").unwrap().build();
    let r: Response<Echo> = ch
        .unary(SAY, Request::new(Echo { id: 5 }).with_metadata(md))
        .await
        .unwrap();
    assert_eq!(r.get_ref().id, 5);
    // An interceptor that refuses fails the call locally.
    let refusing = Channel::builder(addr.to_string())
        .interceptor(|method, _| Err(Status::failed_precondition(format!("not calling {method}"))))
        .build();
    let err = call(&refusing, SAY).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(!err.is_remote());
    // Invalid header values are refused when the interceptor is made.
    assert!(Channel::builder("x:1").header("Bad Key", "x").is_err());
    assert!(Channel::builder("x:1").header("ok", "line\nbreak").is_err());
}

/// A channel's headers add up, in the order they were set, after the
/// request's own entries and before what its interceptor adds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_add_up_and_run_before_the_interceptor() {
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let server = Server::builder()
        .unary(SAY, move |req: Request<Echo>| {
            let entries: Vec<(String, Vec<u8>)> = req
                .metadata()
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_vec()))
                .collect();
            let _ = seen_tx.send(entries);
            async move { Ok(Response::new(req.into_inner())) }
        })
        .build();
    let (addr, _stop, _task) = support::serve(server).await;
    let ch = Channel::builder(addr.to_string())
        .header("authorization", "Bearer reader-token")
        .unwrap()
        .interceptor(|method, md| {
            md.ascii("x-method", method).unwrap();
            Ok(())
        })
        .header("x-tenant", "blue")
        .unwrap()
        .build();
    let own = Metadata::builder().ascii("x-trace", "abc").unwrap().build();
    for request in [
        Request::new(Echo { id: 1 }),
        Request::new(Echo { id: 2 }).with_metadata(own),
    ] {
        let with_own = !request.metadata().is_empty();
        let r: Response<Echo> = within(5, "a call", ch.unary(SAY, request)).await.unwrap();
        let mut expected = vec![];
        if with_own {
            expected.push(("x-trace".to_owned(), b"abc".to_vec()));
        }
        expected.extend([
            ("authorization".to_owned(), b"Bearer reader-token".to_vec()),
            ("x-tenant".to_owned(), b"blue".to_vec()),
            ("x-method".to_owned(), SAY.as_bytes().to_vec()),
        ]);
        assert_eq!(
            seen_rx.recv().await.unwrap(),
            expected,
            "call {}",
            r.get_ref().id
        );
    }
    // Without an interceptor, the headers alone (shared, not rebuilt).
    let plain = Channel::builder(addr.to_string())
        .header("authorization", "Bearer reader-token")
        .unwrap()
        .header("x-tenant", "blue")
        .unwrap()
        .build();
    call(&plain, SAY).await.unwrap();
    assert_eq!(
        seen_rx.recv().await.unwrap(),
        vec![
            ("authorization".to_owned(), b"Bearer reader-token".to_vec()),
            ("x-tenant".to_owned(), b"blue".to_vec()),
        ]
    );
}

/// A call that must wait for room (the server takes one call at a time)
/// leaves the fast path after its metadata went through the interceptor:
/// the interceptor still runs once per call, not once per attempt to open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_wait_for_room_are_intercepted_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = Server::builder()
        .max_concurrent_calls(1)
        .unary(SAY, |req: Request<Echo>| async move {
            // Each call carries the interceptor's header exactly once.
            let n = req
                .metadata()
                .iter()
                .filter(|(k, _)| *k == "x-intercepted")
                .count();
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            Ok(Response::new(Echo { id: n as u64 }))
        })
        .build();
    let (addr, _stop, _task) = support::serve(server).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let ch = Channel::builder(addr.to_string())
        .interceptor(move |_, md| {
            counted.fetch_add(1, Ordering::Relaxed);
            md.ascii("x-intercepted", "1")
                .map(|_| ())
                .map_err(|e| Status::internal(e.to_string()))
        })
        .build();
    // Connect first, so that the calls below find the connection ready.
    assert_eq!(call(&ch, SAY).await.unwrap(), 1);
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let ch = ch.clone();
            tokio::spawn(async move { call(&ch, SAY).await })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap().unwrap(), 1);
    }
    assert_eq!(runs.load(Ordering::Relaxed), 17);
}
