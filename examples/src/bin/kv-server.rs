//! The kv cache server.
//!
//! `cargo run --release -p tram-examples --bin kv-server -- --listen 127.0.0.1:7000`

use clap::Parser;
use tram::rpc::Server;
use tram_examples::kv::KvStore;
use tram_examples::proto::kv::kv_server::KvServer;

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7000")]
    listen: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server = Server::builder()
        .add_service(KvServer::new(KvStore::default()))
        .build();
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
