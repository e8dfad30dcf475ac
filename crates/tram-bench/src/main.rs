//! tram-bench: measures tram next to hand-written floors, in separate server
//! and client processes, systems interleaved over several rounds.
//!
//! # Layout
//!
//! - `stream`: message-stream echo throughput (tram's `conn` layer against a
//!   minimal hand-written tokio echo).
//! - `harness`: server child processes, CPU accounting, round statistics.

mod harness;
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
    /// Pipelined echo over one loopback connection: messages per second.
    Stream(stream::Args),
    /// (internal) Runs one system's server; prints its port, exits when
    /// stdin closes.
    #[command(hide = true)]
    Serve(harness::ServeArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Stream(args) => stream::run(&args),
        Command::Serve(args) => harness::serve(&args),
    }
}
