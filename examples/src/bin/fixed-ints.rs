//! A custom codec: fixed-size 4-byte integers with no length prefix, as in
//! snail's benchmark. Pipelines a million of them through an echo server
//! and checks every one comes back in order.
//!
//! `cargo run --release -p tram-examples --bin fixed-ints`

use std::time::Instant;

use bytes::{Buf, BufMut, BytesMut};
use tram::conn::{self, Config, Connection, Decoder, Encoder, TcpConfig, WriteBuf};

/// Big-endian `u32`s back to back. Any 4 bytes are a valid message, so
/// the decoder can never fail or wait on garbage for more than 3 bytes.
#[derive(Debug, Clone, Copy, Default)]
struct U32Codec;

impl Decoder for U32Codec {
    type Item = u32;
    type Error = std::convert::Infallible;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<u32>, Self::Error> {
        Ok((src.len() >= 4).then(|| src.get_u32()))
    }
}

impl Encoder<u32> for U32Codec {
    type Error = std::convert::Infallible;

    fn encode(&mut self, item: u32, dst: &mut WriteBuf) -> Result<(), Self::Error> {
        dst.put_u32(item);
        Ok(())
    }
}

const N: u32 = 1_000_000;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = tram_examples::spawn_echo_server(U32Codec).await?;
    let stream = conn::connect(addr, &TcpConfig::default()).await?;
    let (mut inbound, sender) = Connection::new(stream, U32Codec, Config::default()).into_split();

    let start = Instant::now();
    let writer = tokio::spawn(async move {
        for i in 0..N {
            // Waits whenever the outbound queue is at its byte bound.
            sender.send(i).await?;
        }
        anyhow::Ok(())
    });
    for expected in 0..N {
        let got = inbound.recv().await.expect("server closed")?;
        anyhow::ensure!(got == expected, "got {got}, expected {expected}");
    }
    writer.await??;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{N} integers echoed in order in {:.3} s: {:.2} M round trips/s",
        secs,
        f64::from(N) / secs / 1e6
    );
    Ok(())
}
