//! The gRPC interop test server (`grpc.testing.TestService`, reflection,
//! health) on tram, answering tram and gRPC (h2c) on one port, for any
//! gRPC implementation's interop client or for grpcurl:
//!
//! `cargo run --release -p tram-examples --bin interop-server -- --port 10000`
//!
//! then, say, `grpcurl -plaintext localhost:10000 list`.

use clap::Parser;
use tram::conn::{Listener, TcpConfig};

#[derive(Parser)]
struct Args {
    /// Port to listen on (loopback).
    #[arg(long, default_value_t = 10_000)]
    port: u16,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let listener = Listener::bind(("127.0.0.1", args.port), TcpConfig::default()).await?;
    println!(
        "interop server (tram + gRPC) on {}; Ctrl-C stops it",
        listener.local_addr()?
    );
    tram_examples::interop::server()
        .serve_listener(listener, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
