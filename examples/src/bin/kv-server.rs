//! The kv cache server.
//!
//! `cargo run --release -p tram-examples --bin kv-server -- --listen 127.0.0.1:7000`

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7000")]
    listen: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // tram, and gRPC, gRPC-Web and Connect on the same port.
    let server = tram_examples::kv::server();
    println!(
        "kv server listening on {} (Ctrl-C stops it gracefully)",
        args.listen
    );
    server
        .serve_with_shutdown(&args.listen, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
