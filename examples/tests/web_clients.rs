//! Connect and gRPC-Web on the tram port, from clients no one here wrote:
//! curl running the README's lines, and Connect's own npm clients
//! (connect-node and connect-web, pinned in `examples/web-client`) for
//! every call kind, JSON and protobuf, HTTP/1.1 and HTTP/2. Each skips,
//! saying why, where its tool is missing.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;

use tram::conn::{Listener, TcpConfig};

async fn start() -> SocketAddr {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tram_examples::kv::server();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    addr
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
}

/// The README's curl lines, each followed by a `# ` line with its output.
fn readme_curls() -> Vec<(String, String)> {
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0].starts_with("curl ") && w[1].starts_with("# "))
        .map(|w| (w[0].to_owned(), w[1][2..].to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_curl_lines_answer_as_shown() {
    if !have("curl") {
        println!("SKIPPED: curl is not installed");
        return;
    }
    let curls = readme_curls();
    assert!(curls.len() >= 4, "README shows its curl lines: {curls:?}");
    let addr = start().await;
    for (line, want) in curls {
        let line = line.replace("localhost:7000", &addr.to_string());
        let out = tokio::process::Command::new("sh")
            .args(["-c", &format!("{line} --silent --show-error --max-time 10")])
            .output()
            .await
            .unwrap();
        let got = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            got.trim(),
            want,
            "{line}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_node_and_connect_web_call_every_kind() {
    if !have("node") || !have("npm") {
        println!("SKIPPED: node and npm are not installed");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("web-client");
    if !dir.join("node_modules/@connectrpc/connect-node").exists() {
        let out = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .unwrap();
        if !out.status.success() {
            println!(
                "SKIPPED: `npm ci` in examples/web-client failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
    }
    let fds = std::env::temp_dir().join(format!("tram-kv-{}.fds", std::process::id()));
    std::fs::write(&fds, tram_examples::kv::DESCRIPTORS).unwrap();
    let addr = start().await;
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new("node")
            .arg("kv.mjs")
            .arg(format!("http://{addr}"))
            .arg(&fds)
            .current_dir(&dir)
            .output(),
    )
    .await
    .expect("the Connect clients finish")
    .unwrap();
    let _ = std::fs::remove_file(&fds);
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "a Connect client case failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 6 connect-node transports x 6 cases, 4 fetch transports x 4.
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok ")).count(), 52);
}
