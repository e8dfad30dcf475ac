//! Echo with protobuf messages (prost), length-delimited as protobuf's own
//! `writeDelimitedTo` does. The `payload` field is decoded as a slice of
//! the connection's read buffer: no copy.
//!
//! `cargo run -p tram-examples --bin echo-prost`

use bytes::Bytes;
use tram::conn::{self, Config, Connection, ProstCodec, TcpConfig};

#[derive(Clone, PartialEq, prost::Message)]
struct Ping {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(bytes = "bytes", tag = "2")]
    payload: Bytes,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = tram_examples::spawn_echo_server(ProstCodec::<Ping>::new()).await?;
    let stream = conn::connect(addr, &TcpConfig::default()).await?;
    let (mut inbound, sender) =
        Connection::new(stream, ProstCodec::<Ping>::new(), Config::default()).into_split();

    for id in 0..3 {
        sender
            .send(Ping {
                id,
                payload: Bytes::from(format!("ping {id}")),
            })
            .await?;
    }
    for _ in 0..3 {
        let pong = inbound.recv().await.expect("server closed")?;
        println!("echoed: id={} payload={:?}", pong.id, pong.payload);
    }
    Ok(())
}
