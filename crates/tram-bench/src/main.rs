//! tram-bench: measures tram next to hand-written floors, in separate server
//! and client processes, systems interleaved over several rounds.
//!
//! # Layout
//!
//! Layered one way: this CLI → `bench` → {`systems`, `runner`, `report`}.
//!
//! - `bench`: the benchmarks. `compare`: closed-loop unary echo, tram
//!   against tonic, protosocket-rpc, a raw-TCP floor and tram's gRPC
//!   gateway; `rate`: open-loop unary load at fixed rates, latency from
//!   intended send times, the highest rate each system holds at p99.9 <
//!   1 ms / 5 ms (over one connection or many), the guest's own stalls;
//!   `fanin`: one server, many client connections; `stream`: message
//!   streams and server streaming; `targets`: the result files read
//!   against tram's performance targets.
//! - `systems`: what is measured, named by `System`: each system's server
//!   and clients.
//! - `runner`: server child processes, pinning, CPU accounting, the
//!   measuring window, and the loads every client runs under.
//! - `report`: statistics over rounds, latency histograms, result files
//!   and SVG charts.
//!
//! Every command writes its results as JSON (and `compare` and `rate` an
//! SVG chart) under `--out` (default `target/tram-bench`).

mod bench;
mod report;
mod runner;
mod systems;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "tram-bench",
    about = "Benchmarks tram against its floor and peers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Unary RPC echo: tram vs tonic vs protosocket-rpc vs a raw floor.
    Compare(bench::compare::Args),
    /// Open-loop unary load at a sweep of fixed rates: latency from each
    /// call's intended send time, highest rate under p99.9 < 1 ms / 5 ms.
    Rate(bench::rate::Args),
    /// Streaming over one loopback connection: messages per second.
    Stream(bench::stream::Args),
    /// One server, many client connections (spread over client threads):
    /// calls/s and CPU per call as the connections grow.
    Fanin(bench::fanin::Args),
    /// One client balancing over several servers, open loop, as one is
    /// slowed, another killed and restarted: tram's channel and tonic's
    /// `balance_list`.
    Fleet(bench::fleet::Args),
    /// A fixed number of unary calls in one thread, client and server in
    /// this process: run it under callgrind for instructions per call.
    Instructions(bench::instructions::Args),
    /// Reads the result files under each directory against tram's
    /// performance targets (issue 19): each target's reading and whether
    /// it was met, run by run, and over every directory given.
    Targets(bench::targets::Args),
    /// (internal) Runs one system's server; prints its port, exits when
    /// stdin closes.
    #[command(hide = true)]
    Serve(ServeArgs),
    /// (internal) Keeps `--threads` threads busy until stdin closes: the
    /// noisy neighbours of `--neighbours`.
    #[command(hide = true)]
    Spin {
        #[arg(long, default_value_t = 1)]
        threads: u16,
    },
}

/// Arguments of the hidden `serve` subcommand.
#[derive(clap::Args, Debug, Clone)]
struct ServeArgs {
    /// Which kind of server.
    #[arg(long, value_enum)]
    workload: systems::Workload,
    /// Which system.
    #[arg(long, value_enum)]
    system: systems::System,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Pin the process to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Loopback port to listen on (0: any).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Compare(args) => bench::compare::run(&args),
        Command::Rate(args) => bench::rate::run(&args),
        Command::Stream(args) => bench::stream::run(&args),
        Command::Fanin(args) => bench::fanin::run(&args),
        Command::Instructions(args) => bench::instructions::run(&args),
        Command::Fleet(args) => bench::fleet::run(&args),
        Command::Targets(args) => bench::targets::run(&args),
        Command::Serve(a) => runner::serve_child(a.cpu, a.workers, a.port, |listener| {
            systems::serve(a.workload, a.system, listener, a.workers)
        }),
        Command::Spin { threads } => runner::neighbours::spin(threads),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tram-bench").chain(args.iter().copied()))
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn compare_defaults_and_lists() {
        let Command::Compare(a) = parse(&["compare"]).unwrap().command else {
            panic!("not compare")
        };
        assert_eq!(a.concurrency, vec![1, 32, 256]);
        assert_eq!(a.payload, vec![16]);
        assert_eq!(a.proc.workers, 2);
        assert!(!a.proc.pin);
        let Command::Compare(a) = parse(&[
            "compare",
            "--concurrency",
            "1,8",
            "--payload",
            "16,512,16384",
            "--workers",
            "1",
            "--pin",
            "--systems",
            "tram,floor",
        ])
        .unwrap()
        .command
        else {
            panic!("not compare")
        };
        assert_eq!(a.concurrency, vec![1, 8]);
        assert_eq!(a.payload, vec![16, 512, 16384]);
        assert_eq!(
            a.systems,
            vec![systems::System::Tram, systems::System::Floor]
        );
        assert_eq!((a.proc.workers, a.proc.pin), (1, true));
        assert_eq!(a.proc.client_workers, None);
        assert_eq!(a.proc.describe(), "1 worker per process, pinned");
        let Command::Compare(a) = parse(&["compare", "--client-workers", "1"])
            .unwrap()
            .command
        else {
            panic!("not compare")
        };
        assert_eq!((a.proc.workers, a.proc.client_workers), (2, Some(1)));
        assert_eq!(a.proc.describe(), "1 client worker, 2 per server");
        let Command::Compare(a) = parse(&["compare", "--neighbours", "1"]).unwrap().command else {
            panic!("not compare")
        };
        assert_eq!(a.proc.neighbours, 1);
        assert_eq!(
            a.proc.describe(),
            "2 workers per process, 1 busy neighbour thread"
        );
        let Command::Compare(a) = parse(&["compare", "--one-cpu"]).unwrap().command else {
            panic!("not compare")
        };
        assert!(a.proc.one_cpu && !a.proc.pin);
        assert_eq!(a.proc.describe(), "2 workers per process, all on CPU 0");
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(parse(&["compare", "--workers", "0"]).is_err());
        assert!(parse(&["compare", "--client-workers", "0"]).is_err());
        assert!(parse(&["compare", "--neighbours", "65"]).is_err());
        assert!(
            parse(&["compare", "--pin", "--one-cpu"]).is_err(),
            "one pinning at a time"
        );
        assert!(parse(&["compare", "--concurrency", "many"]).is_err());
        assert!(parse(&["rate", "--rates", "10k,fast"]).is_err());
        assert!(parse(&["frobnicate"]).is_err());
        assert!(parse(&["targets"]).is_err(), "targets needs a directory");
        assert!(parse(&["compare", "--systems", "tram,grpc-java"]).is_err());
    }

    #[test]
    fn rate_parses_suffixed_rates() {
        let Command::Rate(a) = parse(&["rate", "--rates", "50k,1.5M", "--secs", "0.5"])
            .unwrap()
            .command
        else {
            panic!("not rate")
        };
        assert_eq!(a.rates, vec![50_000, 1_500_000]);
        assert_eq!(a.secs, 0.5);
    }
}
