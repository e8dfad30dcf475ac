//! The message-stream demo: an echo server and a loaded client
//! over one loopback TCP connection, with live progress and a result table.
//!
//! The client keeps 256 messages in flight for 3 seconds. Each message
//! carries its send time, so every echo gives a round-trip latency.
//!
//! `cargo run --release -p tram-examples --bin stream-demo`

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use hdrhistogram::Histogram;
use tokio::sync::Semaphore;
use tram::conn::{self, Config, Connection, LengthDelimited, TcpConfig};

const IN_FLIGHT: usize = 256;
const PAYLOAD: usize = 16;
const RUN: Duration = Duration::from_secs(3);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let addr = tram_examples::spawn_echo_server(LengthDelimited::new()).await?;
    let stream = conn::connect(addr, &TcpConfig::default()).await?;
    let (mut inbound, sender) =
        Connection::new(stream, LengthDelimited::new(), Config::default()).into_split();
    println!(
        "tram message-stream echo over {addr}: {PAYLOAD}-byte messages, {IN_FLIGHT} in flight, {}s",
        RUN.as_secs()
    );

    let epoch = Instant::now();
    let window = Arc::new(Semaphore::new(IN_FLIGHT));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let (window, stop) = (window.clone(), stop.clone());
        async move {
            let mut msg = BytesMut::with_capacity(PAYLOAD);
            while !stop.load(Ordering::Relaxed) {
                window.acquire().await?.forget();
                // The payload starts with the send time in nanoseconds.
                msg.put_u64(epoch.elapsed().as_nanos() as u64);
                msg.resize(PAYLOAD, 0);
                sender.send(msg.split().freeze()).await?;
            }
            anyhow::Ok(())
        }
    });

    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let mut done = 0u64;
    let mut next_report = Instant::now() + Duration::from_millis(500);
    let start = Instant::now();
    while start.elapsed() < RUN {
        let echo: Bytes = match tokio::time::timeout(Duration::from_secs(1), inbound.recv()).await {
            Ok(Some(m)) => m?,
            Ok(None) => anyhow::bail!("server closed the connection"),
            Err(_) => anyhow::bail!("no echo for a second"),
        };
        let sent = (&echo[..8]).get_u64();
        hist.record(
            (epoch.elapsed().as_nanos() as u64)
                .saturating_sub(sent)
                .max(1),
        )?;
        window.add_permits(1);
        done += 1;
        if Instant::now() >= next_report {
            next_report += Duration::from_millis(500);
            eprint!(
                "\r  {:>5.1}s  {:>10} echoes  {:>8.0} k/s  p99 {:>7.1} µs",
                start.elapsed().as_secs_f64(),
                done,
                done as f64 / start.elapsed().as_secs_f64() / 1e3,
                hist.value_at_quantile(0.99) as f64 / 1e3
            );
            std::io::stderr().flush()?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    writer.abort();
    eprintln!();

    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
    println!();
    println!("| echoes | echoes/s | p50 µs | p99 µs | p99.9 µs | max µs |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {done} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} |",
        done as f64 / secs,
        us(0.5),
        us(0.99),
        us(0.999),
        hist.max() as f64 / 1e3
    );
    Ok(())
}
