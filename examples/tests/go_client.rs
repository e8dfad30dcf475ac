//! The Go client (`go/tram`) against the Rust kv server over loopback:
//! every call kind, errors, deadlines, cancellation, many calls at once
//! (`go test` with the server's address in `TRAM_KV_ADDR`). Skipped, saying
//! why, where Go is not installed.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use tram::conn::{Listener, TcpConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_client_calls_the_rust_server() {
    if std::process::Command::new("go")
        .arg("version")
        .output()
        .is_err()
    {
        println!("SKIPPED: Go is not installed, so the Go client cannot be tested");
        return;
    }
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tram_examples::kv::server().serve_listener(listener, std::future::pending()));
    let go = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../go");
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(300),
        tokio::process::Command::new("go")
            .args(["test", "-count=1", "-v", "./tram"])
            .env("TRAM_KV_ADDR", addr.to_string())
            .current_dir(&go)
            .output(),
    )
    .await
    .expect("go test finishes")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "the Go client failed against the Rust server:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("--- SKIP"), "no case skipped:\n{stdout}");
    assert!(stdout.matches("--- PASS").count() >= 5, "{stdout}");
}

/// The Go code generator's test input is these examples' descriptors, as
/// tram-build writes them: the committed copy must match.
#[test]
fn the_go_generators_descriptors_are_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../go/gen/testdata/examples.binpb");
    let committed = std::fs::read(&path).unwrap();
    if committed != tram_examples::kv::DESCRIPTORS {
        std::fs::write(&path, tram_examples::kv::DESCRIPTORS).unwrap();
        panic!(
            "go/gen/testdata/examples.binpb was stale and has been rewritten: \
             run `go test ./... -run TestGeneratedCodeIsCurrent -update` in go/gen and commit both"
        );
    }
}
