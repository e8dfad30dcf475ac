//! What the RPC fuzz targets share: the message type, the runtime, and the
//! check of what a peer wrote.
#![allow(dead_code)]

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tram::wire::{self, FrameDecoder, Settings};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Num {
    #[prost(uint64, tag = "1")]
    pub n: u64,
}

/// A response stream of `n` numbers (none for 0).
pub struct Count(pub u64);

impl futures_core::Stream for Count {
    type Item = Result<Num, tram::rpc::Status>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.0 == 0 {
            return std::task::Poll::Ready(None);
        }
        self.0 -= 1;
        std::task::Poll::Ready(Some(Ok(Num { n: self.0 })))
    }
}

pub fn metadata() -> wire::Metadata {
    wire::Metadata::builder()
        .ascii("k", "v")
        .expect("valid")
        .build()
}

/// The start of a peer's bytes: its preface and SETTINGS, or nothing (a
/// peer that skips the handshake).
pub fn hello(preface: bool) -> BytesMut {
    let mut b = BytesMut::new();
    if preface {
        b.extend_from_slice(&wire::preface::PREFACE);
        wire::Frame::Settings(Settings::DEFAULT).encode(&mut b);
    }
    b
}

/// A current-thread runtime with the clock paused: deadlines and sleeps
/// run instantly, and a hang shows as libFuzzer's timeout.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("runtime")
}

/// `out`, all that `who` wrote, is its preface and then whole, well-formed
/// frames.
pub fn assert_well_formed(out: &[u8], who: &str) {
    assert!(
        out.starts_with(&wire::preface::PREFACE),
        "{who} output starts with the preface"
    );
    let mut rest = BytesMut::from(&out[wire::preface::PREFACE.len()..]);
    let mut dec = FrameDecoder::new(Settings::DEFAULT.max_frame_size);
    while !rest.is_empty() {
        match dec.decode(&mut rest) {
            Ok(Some(_)) => {}
            Ok(None) => panic!("{who} output ends inside a frame"),
            Err(e) => panic!("{who} wrote a malformed frame: {e}"),
        }
    }
}

/// Plays the peer on `io`: writes `input` and closes its side, while
/// reading everything the other end writes until it closes; returns that.
pub async fn exchange<IO: AsyncRead + AsyncWrite>(io: IO, input: &[u8]) -> Vec<u8> {
    let (mut rd, mut wr) = tokio::io::split(io);
    let write = async {
        let _ = wr.write_all(input).await;
        let _ = wr.shutdown().await;
    };
    let read = async {
        let mut out = Vec::new();
        let _ = rd.read_to_end(&mut out).await;
        out
    };
    let ((), out) = tokio::join!(write, read);
    out
}
