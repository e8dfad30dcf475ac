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
    // gRPC, gRPC-Web and Connect (with JSON, so curl works) on the same
    // port as tram.
    let config = tram_grpc::GatewayConfig {
        cors_allow_origin: Some("*".into()),
        ..tram_grpc::GatewayConfig::default()
    }
    .with_descriptors(&[tram::include_file_descriptor_set!()]);
    let server = tram_grpc::with_gateway_config(server, config);
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
