//! tram-bench: measures tram next to hand-written floors, in separate server
//! and client processes, systems interleaved over several rounds.
//!
//! # Layout
//!
//! - `compare`: unary RPC echo, tram against tonic and protosocket-rpc and
//!   a raw-TCP floor.
//! - `rate`: open-loop unary load at fixed rates, latency from intended
//!   send times; the highest rate each system holds at p99.9 < 1 ms / 5 ms.
//! - `stream`: message-stream echo throughput (tram's `conn` layer against a
//!   minimal hand-written tokio echo), and server streaming (tram RPC
//!   against protosocket-rpc and a one-way floor).
//! - `harness`: server child processes, CPU accounting, pinning, latency
//!   recording, round statistics, result files; `chart`: SVG charts;
//!   `ps`: protosocket-rpc's message type and service.
//!
//! Every command writes its results as JSON (and `compare` and `rate` an
//! SVG chart) under `--out` (default `target/tram-bench`).

mod chart;
mod compare;
mod harness;
mod ps;
mod rate;
mod stream;

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
    Compare(compare::Args),
    /// Open-loop unary load at a sweep of fixed rates: latency from each
    /// call's intended send time, highest rate under p99.9 < 1 ms / 5 ms.
    Rate(rate::Args),
    /// Streaming over one loopback connection: messages per second.
    Stream(stream::Args),
    /// (internal) Runs one system's server; prints its port, exits when
    /// stdin closes.
    #[command(hide = true)]
    Serve(harness::ServeArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Compare(args) => compare::run(&args),
        Command::Rate(args) => rate::run(&args),
        Command::Stream(args) => stream::run(&args),
        Command::Serve(args) => harness::serve(&args),
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
        assert_eq!(a.systems, vec!["tram", "floor"]);
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
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(parse(&["compare", "--workers", "0"]).is_err());
        assert!(parse(&["compare", "--client-workers", "0"]).is_err());
        assert!(parse(&["compare", "--concurrency", "many"]).is_err());
        assert!(parse(&["rate", "--rates", "10k,fast"]).is_err());
        assert!(parse(&["frobnicate"]).is_err());
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
