//! One point of the sweep: a system at one rate, on a fresh connection,
//! its calls issued on schedule by a dispatcher thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::tally::{self, Ender, Tally};
use super::{Args, RoundResult, Schedule};
use crate::runner::clock::Stamp;
use crate::runner::latency::{Hist, new_hist};
use crate::runner::load::static_payload;
use crate::runner::{Server, pid_cpu, self_cpu};
use crate::systems::{self, Echo, System, UnaryClient, WithEcho};

/// One step's connections and schedule, shared by the dispatcher and the
/// batches' tasks (not by the calls' own: see `tally`).
struct StepState {
    /// One per connection; call `i` goes to `clients[i % len]`.
    clients: Vec<UnaryClient>,
    /// The open-loop floor's connections, which take the schedule's
    /// batches instead (call `i` in the batch for `floor[i % len]`).
    floor: std::sync::OnceLock<Vec<systems::FloorOpenLoop>>,
    /// `floor-tasks`: each of the floor's calls a task, waiting for its
    /// echo here, keyed by its intended send time (unique per call).
    waiting: Option<Mutex<HashMap<u64, oneshot::Sender<()>>>>,
    /// A payload whose clones write no shared count.
    payload: Bytes,
    epoch: Stamp,
    schedule: Schedule,
    /// The measuring window, in nanoseconds from `epoch`.
    window: (u64, u64),
    ender: Ender,
    /// How late each call of the window began: how long after its
    /// intended send time its batch's task first ran on the client's
    /// runtime (the dispatcher's own lateness included). Locked once a
    /// batch.
    started_late: Mutex<Hist>,
}

/// What call `i`'s task takes along: copies, and a payload without a
/// shared count.
struct Call {
    payload: Bytes,
    schedule: Schedule,
    ender: Ender,
    i: u64,
}

impl Call {
    /// The call, on `client` (its own clone, with its system's type).
    async fn run<C: Echo>(self, mut client: C) {
        let intended = self.schedule.intended(self.i);
        let id = self.i + 1;
        let ok = matches!(client.echo(id, self.payload).await, Ok(got) if got == id);
        self.ender.finish(intended, ok);
    }
}

impl StepState {
    /// Records how late the calls of `batch` begin, now.
    fn started(&self, batch: std::ops::Range<u64>) {
        self.record_late(&mut self.started_late.lock(), batch);
    }

    /// Records in `late` how far behind their intended send times the
    /// window's calls of `batch` are, now.
    fn record_late(&self, late: &mut Hist, batch: std::ops::Range<u64>) {
        let now = self.epoch.elapsed();
        let (start, end) = self.window;
        for t in batch.map(|i| self.schedule.intended(i)) {
            if (start..end).contains(&t) {
                late.saturating_record(now.saturating_sub(t).max(1));
            }
        }
    }

    /// Issues the calls of `batch`: to the floor in one write per
    /// connection (for `floor-tasks`, each call's task spawned first), or
    /// each as its own task.
    async fn issue(self: Arc<Self>, batch: std::ops::Range<u64>) {
        self.started(batch.clone());
        if let Some(floor) = self.floor.get() {
            let n = floor.len() as u64;
            // Each connection's calls of the batch: `first`, `first + n`, ...
            for first in batch.start..batch.end.min(batch.start + n) {
                let conn = &floor[(first % n) as usize];
                let mine = (first..batch.end).step_by(n as usize);
                let times = mine.clone().map(|i| self.schedule.intended(i));
                if let Some(waiting) = &self.waiting {
                    for t in times.clone() {
                        let (tx, rx) = oneshot::channel();
                        waiting.lock().insert(t, tx);
                        let ender = self.ender;
                        tokio::spawn(async move {
                            let ok = rx.await.is_ok();
                            ender.finish(t, ok);
                        });
                    }
                }
                if conn.send(times.clone()).await.is_err() {
                    match &self.waiting {
                        // Dropping a call's sender fails its task.
                        Some(waiting) => times.for_each(|t| drop(waiting.lock().remove(&t))),
                        None => times.for_each(|t| self.ender.finish(t, false)),
                    }
                }
            }
            return;
        }
        for i in batch {
            let client = &self.clients[(i % self.clients.len() as u64) as usize];
            client.clone().with(Call {
                payload: self.payload.clone(),
                schedule: self.schedule,
                ender: self.ender,
                i,
            });
        }
    }
}

/// Spawns the call as a task of its own.
impl WithEcho for Call {
    type Output = ();
    fn with<C: Echo>(self, client: C) {
        tokio::spawn(self.run(client));
    }
}

/// Runs one system at one rate on a fresh connection: warm-up, then the
/// measuring window, then waits for the window's calls to finish.
pub(super) async fn step(
    system: System,
    server: &Server,
    rate: u64,
    args: &Args,
) -> anyhow::Result<RoundResult> {
    let floor = matches!(system, System::Floor | System::FloorTasks);
    // The floor has clients of its own, made once the state is.
    let connections = if floor { 0 } else { args.connections.max(1) };
    let mut clients = Vec::with_capacity(connections);
    for _ in 0..connections {
        let client = UnaryClient::connect(system, server.addr())
            .await
            .with_context(|| format!("{system}: connecting"))?;
        clients.push(client);
    }
    let warm = (args.warmup * 1e9) as u64;
    let end = warm + (args.secs * 1e9) as u64;
    let epoch = Stamp::now();
    let (tally, ender) = Tally::begin(epoch, (warm, end));
    let state = Arc::new(StepState {
        clients,
        floor: std::sync::OnceLock::new(),
        waiting: (system == System::FloorTasks).then(|| Mutex::new(HashMap::new())),
        payload: static_payload(args.payload),
        epoch,
        schedule: Schedule::new(rate),
        window: (warm, end),
        ender,
        started_late: Mutex::new(new_hist()),
    });
    if floor {
        let mut conns = Vec::with_capacity(args.connections.max(1));
        for _ in 0..args.connections.max(1) {
            let weak = Arc::downgrade(&state);
            let on_echo = move |sent: &[u64]| {
                let Some(state) = weak.upgrade() else { return };
                match &state.waiting {
                    Some(waiting) => {
                        let mut waiting = waiting.lock();
                        for t in sent {
                            if let Some(tx) = waiting.remove(t) {
                                let _ = tx.send(());
                            }
                        }
                    }
                    None => sent.iter().for_each(|&t| state.ender.finish(t, true)),
                }
            };
            let conn =
                systems::FloorOpenLoop::connect(server.addr(), state.payload.clone(), on_echo)
                    .await
                    .context("floor: connecting")?;
            conns.push(conn);
        }
        let _ = state.floor.set(conns);
    }
    let cpu = Arc::new(Mutex::new(None));
    let stop = Arc::new(AtomicBool::new(false));
    let dispatcher = std::thread::Builder::new()
        .name("dispatcher".into())
        .spawn({
            let (state, handle) = (state.clone(), tokio::runtime::Handle::current());
            let (max_in_flight, stop) = (args.max_in_flight, stop.clone());
            let server_pid = server.pid();
            let cpu = cpu.clone();
            move || dispatch(&state, &handle, max_in_flight, &stop, server_pid, &cpu)
        })?;
    // Wait for the schedule to run out, then for the window's calls.
    let finished = tokio::task::spawn_blocking(move || dispatcher.join()).await?;
    let (dispatched_late, issued) =
        finished.map_err(|_| anyhow::anyhow!("dispatcher panicked"))??;
    let grace = Instant::now() + Duration::from_secs(5);
    while tally::ended() < issued && Instant::now() < grace {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stop.store(true, Ordering::Relaxed);
    // Calls never echoed within the grace: their tasks end, failed.
    if let Some(waiting) = &state.waiting {
        waiting.lock().clear();
    }
    let ((c0, s0), (c1, s1)) = cpu.lock().take().context("no CPU readings")?;
    let secs = args.secs;
    let totals = tally.totals();
    let completed = totals.completed as f64;
    let calls = (completed).max(1.0);
    let result = RoundResult {
        achieved: completed / secs,
        hist: totals.hist,
        started_late: std::mem::replace(&mut *state.started_late.lock(), new_hist()),
        dispatched_late,
        client_us: (c1 - c0).as_secs_f64() * 1e6 / calls,
        server_us: (s1 - s0).as_secs_f64() * 1e6 / calls,
        // Calls still unanswered after the grace failed too.
        errors: totals.errors + issued.saturating_sub(totals.ended),
    };
    Ok(result)
}

/// The dispatcher's shortest sleep, in nanoseconds.
const MIN_NAP: u64 = 50_000;

type CpuReadings = Option<((Duration, Duration), (Duration, Duration))>;

/// The schedule keeper: issues every call due, in batches, until the end of
/// the window; reads both processes' CPU at the window's edges. Returns how
/// late it handed each of the window's calls over (its own share of the
/// calls' lateness, a sleeping thread's wake-up on this machine) and how
/// many calls it issued.
fn dispatch(
    state: &Arc<StepState>,
    handle: &tokio::runtime::Handle,
    max_in_flight: usize,
    stop: &AtomicBool,
    server_pid: u32,
    cpu: &Mutex<CpuReadings>,
) -> anyhow::Result<(Hist, u64)> {
    // Timer slack is 50 µs by default: each sleep would overshoot by that
    // much on top of the wake-up itself. 1 ns keeps the schedule close.
    crate::runner::tight_timer_slack();
    let (start, end) = state.window;
    let total = state.schedule.due_by(end.saturating_sub(1));
    let read_cpu =
        || -> anyhow::Result<(Duration, Duration)> { Ok((self_cpu()?, pid_cpu(server_pid)?)) };
    let mut first = None;
    let mut issued = 0u64;
    let mut late = new_hist();
    while issued < total && !stop.load(Ordering::Relaxed) {
        let now = state.epoch.elapsed();
        if first.is_none() && now >= start {
            first = Some(read_cpu()?);
        }
        let due = state.schedule.due_by(now).min(total);
        let in_flight = issued.saturating_sub(tally::ended());
        let room = (max_in_flight as u64).saturating_sub(in_flight);
        let upto = due.min(issued + room);
        if upto > issued {
            state.record_late(&mut late, issued..upto);
            handle.spawn(state.clone().issue(issued..upto));
            issued = upto;
        }
        let next = if issued < due {
            // Held back by max_in_flight: look again shortly.
            now + 50_000
        } else {
            state.schedule.intended(issued)
        };
        let now = state.epoch.elapsed();
        if next > now {
            // A wake-up takes ~20 µs here even with no slack: aim early, but
            // sleep at least `MIN_NAP` (calls due meanwhile go as a batch).
            let nap = (next - now)
                .saturating_sub(20_000)
                .clamp(MIN_NAP, 1_000_000);
            std::thread::sleep(Duration::from_nanos(nap));
        }
    }
    // The window's end, for the CPU reading.
    let now = state.epoch.elapsed();
    if now < end {
        std::thread::sleep(Duration::from_nanos(end - now));
    }
    let last = read_cpu()?;
    *cpu.lock() = Some((first.unwrap_or(last), last));
    Ok((late, issued))
}
