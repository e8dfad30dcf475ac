//! The generated kv service, all four call kinds, over real loopback TCP.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use bytes::Bytes;
use support::{set, within};
use tram::conn::{Listener, TcpConfig};
use tram::{Code, Request, Server};
use tram_examples::kv::KvStore;
use tram_examples::proto::kv::{self, command::Op, kv_client::KvClient, kv_server::KvServer};

async fn start() -> KvClient {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .add_service(KvServer::new(KvStore::default()))
        .build();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    KvClient::connect_lazy(addr.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unary_get_set_delete() {
    let client = start().await;
    let miss = client
        .get(kv::GetRequest { key: "a".into() })
        .await
        .unwrap()
        .into_inner();
    assert!(!miss.found);
    client.set(set("a", "1")).await.unwrap();
    let hit = client
        .get(kv::GetRequest { key: "a".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((hit.found, &hit.value[..]), (true, &b"1"[..]));
    assert!(
        client
            .delete(kv::DeleteRequest { key: "a".into() })
            .await
            .unwrap()
            .get_ref()
            .deleted
    );
    assert!(
        !client
            .delete(kv::DeleteRequest { key: "a".into() })
            .await
            .unwrap()
            .get_ref()
            .deleted
    );
    // The handler's error status reaches the client.
    let err = client
        .get(kv::GetRequest { key: String::new() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_changes_under_a_prefix() {
    let client = start().await;
    let mut events = client
        .watch(kv::WatchRequest {
            prefix: "user/".into(),
        })
        .await
        .unwrap();
    // Give the watcher time to subscribe before the writes.
    tokio::time::sleep(Duration::from_millis(50)).await;
    client.set(set("other/x", "no")).await.unwrap();
    client.set(set("user/1", "ada")).await.unwrap();
    client
        .delete(kv::DeleteRequest {
            key: "user/1".into(),
        })
        .await
        .unwrap();
    let first = within("first event", events.message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (first.key.as_str(), &first.value[..], first.deleted),
        ("user/1", &b"ada"[..], false)
    );
    let second = within("second event", events.message())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((second.key.as_str(), second.deleted), ("user/1", true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_set_counts_a_client_stream() {
    let client = start().await;
    let mut sink = client.bulk_set_sink(()).await.unwrap();
    for i in 0..1000 {
        sink.send(set(&format!("k{i}"), &i.to_string()))
            .await
            .unwrap();
    }
    let done = within("bulk set", sink.finish()).await.unwrap();
    assert_eq!(done.get_ref().count, 1000);
    let v = client
        .get(kv::GetRequest { key: "k999".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(&v.value[..], b"999");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_answers_commands_in_order() {
    let client = start().await;
    let (mut commands, mut results) = client.session_sink(()).await.unwrap();
    let ops = [
        Op::Set(set("s", "v")),
        Op::Get(kv::GetRequest { key: "s".into() }),
        Op::Delete(kv::DeleteRequest { key: "s".into() }),
        Op::Get(kv::GetRequest { key: "s".into() }),
    ];
    for (id, op) in ops.into_iter().enumerate() {
        commands
            .send(kv::Command {
                id: id as u64,
                op: Some(op),
            })
            .await
            .unwrap();
    }
    commands.close();
    let mut got = Vec::new();
    while let Some(r) = within("session result", results.message()).await.unwrap() {
        got.push((r.id, r.found, r.value));
    }
    assert_eq!(
        got,
        vec![
            (0, true, Bytes::new()),
            (1, true, Bytes::from_static(b"v")),
            (2, true, Bytes::new()),
            (3, false, Bytes::new()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_set_takes_a_stream_of_requests() {
    let client = start().await;
    let requests = tokio_stream::iter((0..500).map(|i| set(&format!("s{i}"), "v")));
    let done = within("bulk set from a stream", client.bulk_set(requests))
        .await
        .unwrap();
    assert_eq!(done.get_ref().count, 500);
    // Wrapped in a Request, for a timeout (or metadata).
    let requests = tokio_stream::iter([set("t", "v")]);
    let done = client
        .bulk_set(Request::new(requests).with_timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(done.get_ref().count, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stream_stops_sending_when_the_server_answers_early() {
    let client = start().await;
    // An endless request stream whose second key the server refuses: the
    // call ends with the server's status instead of sending forever.
    let mut i = 0;
    let requests = tokio_stream::iter(std::iter::from_fn(move || {
        i += 1;
        Some(set(if i == 2 { "" } else { "k" }, "v"))
    }));
    let err = within("early answer", client.bulk_set(requests))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.is_remote());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_takes_a_stream_and_answers_in_order() {
    let client = start().await;
    let commands = tokio_stream::iter(
        [
            Op::Set(set("b", "w")),
            Op::Get(kv::GetRequest { key: "b".into() }),
            Op::Get(kv::GetRequest { key: "nope".into() }),
        ]
        .into_iter()
        .enumerate()
        .map(|(id, op)| kv::Command {
            id: id as u64,
            op: Some(op),
        }),
    );
    let mut results = client.session(commands).await.unwrap();
    let mut got = Vec::new();
    while let Some(r) = within("session result", results.message()).await.unwrap() {
        got.push((r.id, r.found, r.value));
    }
    assert_eq!(
        got,
        vec![
            (0, true, Bytes::new()),
            (1, true, Bytes::from_static(b"w")),
            (2, false, Bytes::new()),
        ]
    );
}
