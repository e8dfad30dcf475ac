//! Echo with JSON lines (serde_json): one JSON value per line, readable with
//! `nc` and `jq`.
//!
//! `cargo run -p tram-examples --bin echo-json`

use serde::{Deserialize, Serialize};
use tram::conn::{self, Config, Connection, JsonLines, TcpConfig};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u64,
    item: String,
    quantity: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = tram_examples::spawn_echo_server(JsonLines::<serde_json_value::Any>::new()).await?;
    let stream = conn::connect(addr, &TcpConfig::default()).await?;
    let (mut inbound, sender) =
        Connection::new(stream, JsonLines::<Order>::new(), Config::default()).into_split();

    for (id, item) in [(1, "tea"), (2, "coffee")] {
        sender
            .send(Order {
                id,
                item: item.into(),
                quantity: 2,
            })
            .await?;
    }
    for _ in 0..2 {
        println!(
            "echoed: {:?}",
            inbound.recv().await.expect("server closed")?
        );
    }
    Ok(())
}

/// The server echoes any JSON value, whatever its shape.
mod serde_json_value {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// Any JSON value, kept as it arrived.
    #[derive(Debug)]
    pub(crate) struct Any(Box<serde_json::value::RawValue>);

    impl<'de> Deserialize<'de> for Any {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            Ok(Any(Deserialize::deserialize(d)?))
        }
    }

    impl Serialize for Any {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.0.serialize(s)
        }
    }
}
