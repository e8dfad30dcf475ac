//! The quick-start demo: the kv cache server and a loaded client over one
//! loopback TCP connection, with live progress and a result table.
//!
//! The server runs on its own tokio runtime (its own 2 threads), the client
//! on another. The client preloads 10,000 keys through one `BulkSet` stream
//! (client streaming), then 64 tasks run a 90/10 Get/Set mix for 3 seconds,
//! and a watcher counts the Set events it is streamed meanwhile. tram's
//! metrics go to a Prometheus recorder, and the demo ends with an excerpt
//! of the scrape (`examples/src/bin/observe.rs` shows all of it).
//!
//! `cargo run --release -p tram-examples --bin demo`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tram::conn::{Listener, TcpConfig};
use tram::rpc::Server;
use tram_examples::kv::KvStore;
use tram_examples::load::{self, LoadConfig, Phase};
use tram_examples::proto::kv::{self, kv_client::KvClient, kv_server::KvServer};

fn main() -> anyhow::Result<()> {
    // Installed before the server and the client are built: they record
    // into it from then on.
    // Histograms with buckets (seconds for durations, bytes for sizes): the
    // exporter's default, summaries with rolling quantiles, costs several
    // times as much per value.
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&[
            1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 64.0, 1024.0,
            16384.0, 1048576.0,
        ])?
        .install_recorder()?;
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = server_rt.block_on(Listener::bind("127.0.0.1:0", TcpConfig::default()))?;
    let addr = listener.local_addr()?;
    let server = Server::builder()
        .add_service(KvServer::new(KvStore::default()))
        .build();
    server_rt.spawn(server.serve_listener(listener, std::future::pending()));

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    client_rt.block_on(async {
        let cfg = LoadConfig::default();
        println!(
            "tram kv demo on {addr}: {} keys of {} bytes, {} calls in flight for {}s",
            cfg.keys,
            cfg.value_size,
            cfg.concurrency,
            cfg.duration.as_secs()
        );
        let client = KvClient::connect_lazy(addr.to_string());
        let preload = load::preload(&client, &cfg).await?;

        // A watcher streams every change while the mix runs.
        let seen = Arc::new(AtomicU64::new(0));
        let mut events = client.watch(kv::WatchRequest { prefix: "key/".into() }).await?;
        let watcher = tokio::spawn({
            let seen = seen.clone();
            async move {
                while let Ok(Some(_)) = events.message().await {
                    seen.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let mix = load::mix(&client, &cfg, true).await?;
        watcher.abort();

        println!();
        println!("{}", Phase::header());
        println!("{}", preload.row());
        println!("{}", mix.row());
        println!();
        println!(
            "watcher: {} change events streamed during the mix (slow watchers are told they lagged)",
            seen.load(Ordering::Relaxed)
        );
        println!();
        println!("server metrics (an excerpt of the Prometheus scrape):");
        for line in metrics.render().lines().filter(|l| scrape_excerpt(l)) {
            println!("  {line}");
        }
        anyhow::Ok(())
    })
}

/// The lines of the scrape the demo prints: the server's calls by method
/// and status, and its connections.
fn scrape_excerpt(line: &str) -> bool {
    line.starts_with("rpc_server_calls_started")
        || line.starts_with("rpc_server_call_duration_count")
        || line.starts_with("tram_connections_opened{side=\"server\"}")
        || line.starts_with("tram_connection_bytes_received{side=\"server\"}")
}
