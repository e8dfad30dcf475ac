//! A load client for the kv server: preload, then a Get/Set mix.
//!
//! `cargo run --release -p tram-examples --bin kv-client -- --target 127.0.0.1:7000 --concurrency 256 --secs 10`

use std::time::Duration;

use clap::Parser;
use tram::Channel;
use tram_examples::load::{self, LoadConfig, Phase};
use tram_examples::proto::kv::kv_client::KvClient;

#[derive(Parser)]
struct Args {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:7000")]
    target: String,
    /// Calls in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Seconds of load.
    #[arg(long, default_value_t = 5)]
    secs: u64,
    /// Distinct keys.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 16)]
    value_size: usize,
    /// Percent of calls that are Set.
    #[arg(long, default_value_t = 10)]
    set_percent: u64,
    /// Connections to spread calls over.
    #[arg(long, default_value_t = 1)]
    connections: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let cfg = LoadConfig {
        concurrency: a.concurrency,
        duration: Duration::from_secs(a.secs),
        keys: a.keys,
        value_size: a.value_size,
        set_percent: a.set_percent.min(100),
    };
    let channel = Channel::builder(a.target).pool_size(a.connections).build();
    let client = KvClient::new(channel);
    let preload = load::preload(&client, &cfg).await?;
    let mix = load::mix(&client, &cfg, true).await?;
    println!("{}\n{}\n{}", Phase::header(), preload.row(), mix.row());
    Ok(())
}
