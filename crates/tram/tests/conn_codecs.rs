//! 10,000 messages through a real loopback connection with each shipped
//! codec arrive intact and in order.
#![allow(clippy::unwrap_used)]

mod support;

use std::fmt::Debug;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use support::{Ended, echo_server, within};
use tram::conn::{
    Config, Connection, Decoder, Encoder, FrameCodec, JsonLines, LengthDelimited, ProstCodec,
    TcpConfig, connect,
};
use tram::wire::{Frame, Message};

const N: usize = 10_000;

/// Sends `msgs` through an echo server while reading the echoes
/// concurrently, and checks they come back equal and in order.
async fn round_trip<C, T>(codec: C, msgs: Vec<T>)
where
    C: Decoder<Item = T> + Encoder<T> + Clone + Send + Sync + Unpin + 'static,
    T: Clone + PartialEq + Debug + Send + 'static,
{
    let (addr, mut ended) = echo_server(codec.clone(), Config::default()).await;
    let stream = connect(addr, &TcpConfig::default()).await.unwrap();
    let (mut inbound, sender) = Connection::new(stream, codec, Config::default()).into_split();
    let expected = msgs.clone();
    let writer = tokio::spawn(async move {
        for m in msgs {
            sender.send(m).await.unwrap();
        }
        // Dropping the sender closes our write side once all is written.
    });
    within(30, "echo of all messages", async {
        for (i, want) in expected.iter().enumerate() {
            let got = inbound.recv().await.expect("stream ended early").unwrap();
            assert_eq!(&got, want, "message {i}");
        }
        assert!(inbound.recv().await.is_none(), "no extra messages");
    })
    .await;
    writer.await.unwrap();
    assert_eq!(
        within(5, "server end", ended.recv()).await,
        Some(Ended::Clean(N))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn length_delimited_bytes() {
    let msgs = (0..N)
        .map(|i| Bytes::from(format!("message {i} {}", "x".repeat(i % 300))))
        .collect();
    round_trip(LengthDelimited::new(), msgs).await;
}

#[derive(Clone, PartialEq, prost::Message)]
struct Echo {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    payload: Bytes,
    #[prost(string, repeated, tag = "3")]
    tags: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prost_messages() {
    let msgs = (0..N as u64)
        .map(|i| Echo {
            id: i * 7919,
            payload: Bytes::from(vec![i as u8; (i % 200) as usize]),
            tags: vec![format!("t{i}")],
        })
        .collect();
    round_trip(ProstCodec::<Echo>::new(), msgs).await;
}

#[derive(Clone, PartialEq, Debug, Serialize, Deserialize)]
struct Event {
    seq: u64,
    name: String,
    values: Vec<f64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines() {
    let msgs = (0..N as u64)
        .map(|i| Event {
            seq: i,
            name: format!("event \"{i}\"\nwith a newline"),
            values: vec![i as f64 / 3.0; (i % 5) as usize],
        })
        .collect();
    round_trip(JsonLines::<Event>::new(), msgs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tram_frames() {
    let msgs = (0..N as u32)
        .map(|i| {
            Frame::Message(Message {
                call: i % 300,
                end_stream: i % 2 == 0,
                metadata: None,
                payload: Bytes::from(i.to_le_bytes().to_vec()),
            })
        })
        .collect();
    round_trip(FrameCodec::default(), msgs).await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket() {
    let dir = std::env::temp_dir().join(format!("tram-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("echo.sock");
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let (mut inbound, sender) =
            Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
        while let Some(Ok(m)) = inbound.recv().await {
            sender.send(m).await.unwrap();
        }
    });
    let stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let (mut inbound, sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
    for i in 0..1000u32 {
        sender.send(i.to_be_bytes()).await.unwrap();
    }
    for i in 0..1000u32 {
        let m = within(5, "unix echo", inbound.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&m[..], &i.to_be_bytes());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
