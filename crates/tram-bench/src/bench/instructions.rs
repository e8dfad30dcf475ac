//! `instructions`: a fixed amount of unary work for instruction counting
//! under callgrind (`valgrind --tool=callgrind`), whose counts repeat for
//! the same binary and input whatever else the machine is doing: the
//! steady instrument for changes too small for the noise of timed runs.
//!
//! One process, one thread: a tram server and a client over loopback TCP
//! on a current-thread runtime, `C` callers making `N` calls in all after
//! a warm-up. Divide the instructions of the run (less those of a run with
//! `--calls 0`) by `N` for instructions per call, client and server
//! together; `callgrind_annotate` splits them by function.
//!
//! ```sh
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/tram-bench instructions --calls 20000
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::systems::{self, System, UnaryClient, Workload};

/// Options of `tram-bench instructions`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Args {
    /// Calls counted, after the warm-up.
    #[arg(long, default_value_t = 20_000)]
    calls: u64,
    /// Calls made before counting starts (connection set-up, buffers
    /// grown).
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// Calls in flight.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Payload bytes per call.
    #[arg(long, default_value_t = 16)]
    payload: usize,
    /// Count messages of one server stream instead of unary calls (`--calls`
    /// messages after `--warmup`).
    #[arg(long)]
    stream: bool,
    /// Unary calls of `tram-observed` (metrics recorder and call spans)
    /// instead of plain tram.
    #[arg(long)]
    observed: bool,
    /// Unary calls of `tram-sync` (the echo registered with `unary_sync`)
    /// instead of plain tram.
    #[arg(long, conflicts_with = "observed")]
    sync: bool,
    /// Unary calls of `floor-tasks` (the least RPC client, a task per
    /// call, against the echo floor's server) instead of tram: what a
    /// call costs with nothing of an RPC system's.
    #[arg(long, conflicts_with_all = ["observed", "sync", "endpoints", "stream"])]
    floor_tasks: bool,
    /// Unary calls of a channel balancing over this many servers (each
    /// on its own loopback port) instead of a channel to one address.
    #[arg(long)]
    endpoints: Option<usize>,
    /// Every call carries this timeout (in milliseconds), as with
    /// `compare --timeout-ms`: what a deadline costs a call.
    #[arg(long, conflicts_with_all = ["floor_tasks", "stream"])]
    timeout_ms: Option<u64>,
    /// Every call carries a bearer token (`authorization`, 48 bytes) in
    /// its metadata, as an authenticated service's calls do.
    #[arg(long, conflicts_with_all = ["floor_tasks", "stream", "endpoints", "observed", "sync"])]
    bearer: bool,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if args.stream {
        return rt.block_on(stream(args));
    }
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let system = if args.observed {
            System::TramObserved
        } else if args.sync {
            System::TramSync
        } else if args.floor_tasks {
            System::FloorTasks
        } else {
            System::Tram
        };
        let mut servers = vec![tokio::spawn(systems::serve(
            Workload::Unary,
            system,
            listener,
            1,
        ))];
        let client = match args.endpoints {
            None => UnaryClient::connect_with(system, addr, args.bearer).await?,
            Some(n) => {
                let mut targets = vec![addr.to_string()];
                for _ in 1..n {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                    targets.push(listener.local_addr()?.to_string());
                    servers.push(tokio::spawn(systems::serve(
                        Workload::Unary,
                        system,
                        listener,
                        1,
                    )));
                }
                let channel = tram::Channel::builder("bench fleet")
                    .endpoints(targets)
                    .metrics(false)
                    .build();
                channel.ready().await?;
                UnaryClient::Tram(channel)
            }
        };
        let timeout = args.timeout_ms.map(std::time::Duration::from_millis);
        let client = client.shaped(timeout, args.bearer);
        let payload = Bytes::from(vec![0xab; args.payload]);
        call_n(&client, args.warmup, args.concurrency, &payload).await?;
        let started = std::time::Instant::now();
        call_n(&client, args.calls, args.concurrency, &payload).await?;
        println!(
            "{} calls, {} in flight, {} B: {:?}",
            args.calls,
            args.concurrency,
            args.payload,
            started.elapsed()
        );
        servers.iter().for_each(|s| s.abort());
        Ok(())
    })
}

/// Makes `n` calls with `c` callers.
async fn call_n(client: &UnaryClient, n: u64, c: usize, payload: &Bytes) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut callers = Vec::new();
    for _ in 0..c {
        let (mut client, next, payload) = (client.clone(), next.clone(), payload.clone());
        callers.push(tokio::spawn(async move {
            loop {
                let id = next.fetch_add(1, Ordering::Relaxed);
                if id >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                let got = client.call(id, payload.clone()).await?;
                anyhow::ensure!(got == id, "response {got} for request {id}");
            }
        }));
    }
    for c in callers {
        c.await??;
    }
    Ok(())
}

/// Reads `warmup + calls` messages of one tram server stream.
async fn stream(args: &Args) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(systems::serve(
        Workload::Stream,
        System::TramRpc,
        listener,
        1,
    ));
    let channel = tram::Channel::connect(addr.to_string()).await?;
    let request = systems::TramEchoMessage {
        id: 0,
        payload: Bytes::from(vec![0xab; args.payload]),
    };
    let mut messages = channel
        .server_streaming::<_, systems::TramEchoMessage>(
            systems::STREAM_PATH,
            tram::Request::new(request),
        )
        .await?;
    for _ in 0..args.warmup {
        messages.message().await?;
    }
    let started = std::time::Instant::now();
    for _ in 0..args.calls {
        messages.message().await?;
    }
    println!(
        "{} messages of {} B: {:?}",
        args.calls,
        args.payload,
        started.elapsed()
    );
    drop(messages);
    server.abort();
    Ok(())
}
