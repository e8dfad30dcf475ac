//! Noisy neighbours: busy threads in a process of their own, competing
//! for the CPUs while the systems run (`--neighbours N`). A service rarely
//! has its machine to itself; this shows whose rate holds when it does
//! not.

use std::io::Read;
use std::process::{Child, Command, Stdio};

use anyhow::Context;

use super::ProcArgs;

/// The neighbours' process, for the life of a benchmark run.
pub(crate) struct Neighbours {
    child: Child,
}

impl Neighbours {
    /// Starts `p.neighbours` busy threads (`tram-bench spin`), unpinned,
    /// if any are asked for.
    pub(crate) fn start(p: &ProcArgs) -> anyhow::Result<Option<Neighbours>> {
        if p.neighbours == 0 {
            return Ok(None);
        }
        let child = Command::new(std::env::current_exe()?)
            .args(["spin", "--threads", &p.neighbours.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .context("spawning the neighbours' process")?;
        Ok(Some(Neighbours { child }))
    }
}

impl Drop for Neighbours {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `spin` subcommand: `threads` threads that only count, until stdin
/// closes (the parent exited or is done with us).
pub(crate) fn spin(threads: u16) -> anyhow::Result<()> {
    for _ in 0..threads {
        std::thread::spawn(|| {
            let mut n = 0u64;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        });
    }
    let mut sink = Vec::new();
    std::io::stdin().read_to_end(&mut sink)?;
    Ok(())
}
