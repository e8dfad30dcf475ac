//! Echo with raw length-delimited bytes: the simplest message stream.
//!
//! `cargo run -p tram-examples --bin echo-bytes`

use bytes::Bytes;
use tram::conn::{self, Config, Connection, LengthDelimited, TcpConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = tram_examples::spawn_echo_server(LengthDelimited::new()).await?;
    let stream = conn::connect(addr, &TcpConfig::default()).await?;
    let (mut inbound, sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();

    for word in ["hello", "message", "streams"] {
        sender.send(Bytes::from(word)).await?;
    }
    for _ in 0..3 {
        let echoed = inbound.recv().await.expect("server closed")?;
        println!("echoed: {}", String::from_utf8_lossy(&echoed));
    }
    Ok(())
}
