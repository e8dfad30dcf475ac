//! A handler that panics, over real loopback TCP: the panic ends the
//! connection it ran on (tram does not catch it, as hyper does not), its
//! caller gets an error rather than waiting forever, and the server and
//! its other connections carry on.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use support::echo::{Echo, echo};
use support::within;
use tram::rpc::{Channel, Code, Request, Response, Server, Status};

const SAY: &str = "/test.Echo/Say";
/// Answers after half a minute: a call still in flight when its
/// connection ends.
const SLOW: &str = "/test.Echo/Slow";
/// Panics as it is first polled (inline, in the connection's turn).
const PANIC_AT_ONCE: &str = "/test.Echo/PanicAtOnce";
/// Panics when polled again after a wait (from the connection's executor).
const PANIC_LATER: &str = "/test.Echo/PanicLater";

fn server() -> Server {
    Server::builder()
        .unary(SAY, |req: Request<Echo>| async move {
            Ok(Response::new(req.into_inner()))
        })
        .unary(SLOW, |req: Request<Echo>| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(Response::new(req.into_inner()))
        })
        .unary(PANIC_AT_ONCE, |_req: Request<Echo>| async move { bug() })
        .unary(PANIC_LATER, |_req: Request<Echo>| async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            bug()
        })
        .build()
}

/// A handler's own bug.
fn bug() -> Result<Response<Echo>, Status> {
    panic!("the handler's own bug")
}

async fn say(ch: &Channel, id: u64) -> Result<Response<Echo>, Status> {
    within(5, "an echo", ch.unary(SAY, Request::new(echo(id)))).await
}

async fn panics_end_only_their_connection(method: &'static str) {
    let (addr, _stop, _task) = support::serve(server()).await;
    let bystander = Channel::new(addr.to_string());
    assert_eq!(say(&bystander, 1).await.unwrap().get_ref().id, 1);

    let victim = Channel::new(addr.to_string());
    assert_eq!(say(&victim, 2).await.unwrap().get_ref().id, 2);
    // A call in flight on the same connection when the handler panics.
    let slow = victim.unary::<Echo, Echo>(SLOW, Request::new(echo(8)));
    let panicking = victim.unary::<Echo, Echo>(method, Request::new(echo(3)));
    let (slow, err) = within(10, "the connection's calls", async {
        tokio::join!(slow, panicking)
    })
    .await;
    let err = err.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
    let slow = slow.unwrap_err();
    assert_eq!(slow.code(), Code::Unavailable, "{slow}");

    // The other connection was not touched, the server still accepts, and
    // the victim's channel reconnects.
    assert_eq!(say(&bystander, 4).await.unwrap().get_ref().id, 4);
    let fresh = Channel::new(addr.to_string());
    assert_eq!(say(&fresh, 5).await.unwrap().get_ref().id, 5);
    let again = within(10, "the victim's channel again", async {
        loop {
            match victim.unary::<Echo, Echo>(SAY, Request::new(echo(6))).await {
                Ok(r) => break r,
                Err(e) if e.code() == Code::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
    })
    .await;
    assert_eq!(again.get_ref().id, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_panicking_at_once_ends_only_its_connection() {
    panics_end_only_their_connection(PANIC_AT_ONCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_panicking_after_a_wait_ends_only_its_connection() {
    panics_end_only_their_connection(PANIC_LATER).await;
}
