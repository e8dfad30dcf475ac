//! Load for the kv service: a preload through `BulkSet` (client streaming),
//! then a closed-loop Get/Set mix from many tasks, with live progress and
//! latency percentiles.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;

use crate::proto::kv::{self, kv_client::KvClient};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Calls in flight (one task each).
    pub concurrency: usize,
    /// How long the mix runs.
    pub duration: Duration,
    /// Distinct keys.
    pub keys: u64,
    /// Bytes per value.
    pub value_size: usize,
    /// Percent of calls that are Set (the rest are Get).
    pub set_percent: u64,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            concurrency: 64,
            duration: Duration::from_secs(3),
            keys: 10_000,
            value_size: 16,
            set_percent: 10,
        }
    }
}

/// One phase's outcome.
#[derive(Debug)]
pub struct Phase {
    /// What ran.
    pub name: String,
    /// Calls (or messages) completed.
    pub calls: u64,
    /// Calls that failed.
    pub errors: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Latency per call in nanoseconds (empty for streams).
    pub latency: Histogram<u64>,
}

impl Phase {
    /// A markdown table row.
    pub fn row(&self) -> String {
        let us = |q: f64| {
            if self.latency.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.1}", self.latency.value_at_quantile(q) as f64 / 1e3)
            }
        };
        format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} |",
            self.name,
            self.calls,
            self.calls as f64 / self.elapsed.as_secs_f64(),
            us(0.5),
            us(0.99),
            us(0.999),
            self.errors
        )
    }

    /// The table header matching [`Phase::row`].
    pub fn header() -> &'static str {
        "| phase | calls | calls/s | p50 µs | p99 µs | p99.9 µs | errors |\n|---|---|---|---|---|---|---|"
    }
}

fn key(i: u64) -> String {
    format!("key/{i:08}")
}

/// Writes every key once through one `BulkSet` stream.
///
/// # Errors
///
/// The call's status.
pub async fn preload(client: &KvClient, cfg: &LoadConfig) -> anyhow::Result<Phase> {
    let start = Instant::now();
    let value = Bytes::from(vec![b'v'; cfg.value_size]);
    let mut sink = client.bulk_set_sink(()).await?;
    for i in 0..cfg.keys {
        sink.send(kv::SetRequest {
            key: key(i),
            value: value.clone(),
        })
        .await?;
    }
    let count = sink.finish().await?.into_inner().count;
    anyhow::ensure!(
        count == cfg.keys,
        "server counted {count} of {} keys",
        cfg.keys
    );
    Ok(Phase {
        name: "preload (BulkSet stream)".into(),
        calls: count,
        errors: 0,
        elapsed: start.elapsed(),
        latency: Histogram::new(3)?,
    })
}

/// Runs the Get/Set mix; prints progress to stderr if `progress`.
///
/// # Errors
///
/// Only for setup; failed calls are counted.
pub async fn mix(client: &KvClient, cfg: &LoadConfig, progress: bool) -> anyhow::Result<Phase> {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..cfg.concurrency {
        let (client, cfg, done, stop) = (client.clone(), cfg.clone(), done.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
            let mut errors = 0u64;
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64 + 1);
            let value = Bytes::from(vec![b'w'; cfg.value_size]);
            while !stop.load(Ordering::Relaxed) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let k = key(rng % cfg.keys);
                let began = Instant::now();
                let ok = if rng % 100 < cfg.set_percent {
                    client
                        .set(kv::SetRequest {
                            key: k,
                            value: value.clone(),
                        })
                        .await
                        .is_ok()
                } else {
                    client.get(kv::GetRequest { key: k }).await.is_ok()
                };
                hist.record((began.elapsed().as_nanos() as u64).max(1))?;
                if !ok {
                    errors += 1;
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok((hist, errors))
        }));
    }
    let mut next = start + Duration::from_millis(500);
    while start.elapsed() < cfg.duration {
        tokio::time::sleep_until(next.into()).await;
        next += Duration::from_millis(500);
        if progress {
            let n = done.load(Ordering::Relaxed);
            eprint!(
                "\r  {:>4.1}s  {:>9} calls  {:>8.0} calls/s ",
                start.elapsed().as_secs_f64(),
                n,
                n as f64 / start.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let mut errors = 0;
    for t in tasks {
        let (h, e) = t.await??;
        latency.add(h)?;
        errors += e;
    }
    let elapsed = start.elapsed();
    if progress {
        eprintln!();
    }
    Ok(Phase {
        name: format!(
            "get/set {}/{} mix, {} in flight",
            100 - cfg.set_percent,
            cfg.set_percent,
            cfg.concurrency
        ),
        calls: latency.len(),
        errors,
        elapsed,
        latency,
    })
}
