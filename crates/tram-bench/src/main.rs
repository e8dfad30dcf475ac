//! tram-bench: measures tram next to hand-written floors, in separate server
//! and client processes, systems interleaved over several rounds.
//!
//! # Layout
//!
//! - `compare`: unary RPC echo, tram against tonic and protosocket-rpc and
//!   a raw-TCP floor.
//! - `stream`: message-stream echo throughput (tram's `conn` layer against a
//!   minimal hand-written tokio echo).
//! - `harness`: server child processes, CPU accounting, round statistics.

mod compare;
mod harness;
mod ps;
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
    /// Pipelined echo over one loopback connection: messages per second.
    Stream(stream::Args),
    /// (internal) Runs one system's server; prints its port, exits when
    /// stdin closes.
    #[command(hide = true)]
    Serve(harness::ServeArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Compare(args) => compare::run(&args),
        Command::Stream(args) => stream::run(&args),
        Command::Serve(args) => harness::serve(&args),
    }
}
