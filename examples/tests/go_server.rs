//! The Rust client against the Go server (`go/cmd/kv-server`, the kv
//! service on `go/tram`'s Server) over loopback: every call kind, errors,
//! deadlines, cancellation, and hostile bytes closing only their own
//! connection. Skipped, saying why, where Go is not installed.
#![allow(clippy::unwrap_used)]

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use support::{set, within};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tram::gateway::RawMessage;
use tram::{Channel, Code, Request};
use tram_examples::proto::kv::{self, command::Op, kv_client::KvClient};

/// Builds and starts the Go kv server; its address and process.
async fn go_server() -> Option<(String, tokio::process::Child)> {
    if std::process::Command::new("go")
        .arg("version")
        .output()
        .is_err()
    {
        println!("SKIPPED: Go is not installed, so the Go server cannot be tested");
        return None;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin = root.join("target/go-kv-server");
    let built = std::process::Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg("./cmd/kv-server")
        .current_dir(root.join("go"))
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut child = tokio::process::Command::new(&bin)
        .args(["-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .await
        .unwrap();
    let port = line.trim().strip_prefix("PORT ").unwrap().to_owned();
    Some((format!("127.0.0.1:{port}"), child))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_calls_the_go_server() {
    let Some((addr, _server)) = go_server().await else {
        return;
    };
    let client = KvClient::connect_lazy(addr.clone());

    // Unary, with metadata.
    let md = tram::Metadata::builder()
        .ascii("x-request-id", "rust-1")
        .unwrap()
        .build();
    within(
        "set",
        client.set(Request::new(set("a", "1")).with_metadata(md)),
    )
    .await
    .unwrap();
    let hit = client
        .get(kv::GetRequest { key: "a".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((hit.found, &hit.value[..]), (true, &b"1"[..]));
    let err = client
        .get(kv::GetRequest { key: String::new() })
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (Code::InvalidArgument, "empty key")
    );
    // An unknown method.
    let channel = Channel::builder(addr.clone()).build();
    let err = channel
        .unary::<RawMessage, RawMessage>("/kv.Kv/Nope", Request::new(RawMessage(Bytes::new())))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented);

    // Many calls at once on one connection.
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..200 {
        let client = client.clone();
        calls.spawn(async move {
            let k = format!("many/{i}");
            client.set(set(&k, &k)).await.unwrap();
            let v = client
                .get(kv::GetRequest { key: k.clone() })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(v.value, Bytes::from(k));
        });
    }
    within("200 calls", async {
        while let Some(r) = calls.join_next().await {
            r.unwrap();
        }
    })
    .await;

    // Server streaming, then cancellation by dropping the stream.
    let mut events = client
        .watch(kv::WatchRequest {
            prefix: "w/".into(),
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    client.set(set("other", "x")).await.unwrap();
    client.set(set("w/1", "one")).await.unwrap();
    client
        .delete(kv::DeleteRequest { key: "w/1".into() })
        .await
        .unwrap();
    let first = within("event", events.message()).await.unwrap().unwrap();
    assert_eq!(
        (first.key.as_str(), &first.value[..], first.deleted),
        ("w/1", &b"one"[..], false)
    );
    let second = within("event", events.message()).await.unwrap().unwrap();
    assert_eq!((second.key.as_str(), second.deleted), ("w/1", true));
    drop(events);

    // A deadline: the Go server ends the call at it.
    let quiet = Request::new(kv::WatchRequest {
        prefix: "quiet/".into(),
    })
    .with_timeout(Duration::from_millis(200));
    let mut q = client.watch(quiet).await.unwrap();
    let err = within("deadline", q.message()).await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded);

    // Client streaming, beyond the initial credit.
    let mut sink = client.bulk_set_sink(()).await.unwrap();
    for i in 0..1000 {
        sink.send(set(&format!("k{i}"), &i.to_string()))
            .await
            .unwrap();
    }
    let done = within("bulk set", sink.finish()).await.unwrap();
    assert_eq!(done.get_ref().count, 1000);

    // Bidirectional, interleaved.
    let (mut commands, mut results) = client.session_sink(()).await.unwrap();
    let ops = [
        Op::Set(set("s", "v")),
        Op::Get(kv::GetRequest { key: "s".into() }),
        Op::Delete(kv::DeleteRequest { key: "s".into() }),
        Op::Get(kv::GetRequest { key: "s".into() }),
    ];
    let want = [
        (true, &b""[..]),
        (true, &b"v"[..]),
        (true, &b""[..]),
        (false, &b""[..]),
    ];
    for (id, (op, want)) in ops.into_iter().zip(want).enumerate() {
        commands
            .send(kv::Command {
                id: id as u64,
                op: Some(op),
            })
            .await
            .unwrap();
        let r = within("session", results.message()).await.unwrap().unwrap();
        assert_eq!((r.id, r.found, &r.value[..]), (id as u64, want.0, want.1));
    }
    commands.close();
    assert!(
        within("session end", results.message())
            .await
            .unwrap()
            .is_none()
    );

    // Hostile bytes: that connection is closed, this client goes on.
    for garbage in [
        &[0xffu8; 64][..],
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x89TRAM\r\n\x01\xf0\x00",
    ] {
        let mut raw = tokio::net::TcpStream::connect(&addr).await.unwrap();
        raw.write_all(garbage).await.unwrap();
        let mut sink = Vec::new();
        // The server answers with its preface and at most a GOAWAY, and
        // closes: the read ends (cleanly or with a reset) within the limit.
        let _ = within("hostile connection closed", raw.read_to_end(&mut sink)).await;
    }
    let v = client
        .get(kv::GetRequest { key: "a".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(&v.value[..], b"1");
}
