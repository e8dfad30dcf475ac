//! grpc-go's own interop client (`google.golang.org/grpc/interop/client`,
//! a pinned version, installed with `go install`) against the interop
//! server on tram's gRPC gateway: every case that needs no cloud
//! credentials and no ORCA. Skipped, saying why, where Go is not installed.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

use tram::conn::{Listener, TcpConfig};

/// The grpc-go release whose interop client is used.
const GRPC_GO: &str = "v1.85.0";

/// The cases grpc-go's client runs against any server (the compressed
/// variants are grpc-java's; the credential and ORCA cases need a cloud
/// or a load reporting server).
const CASES: &[&str] = &[
    "empty_unary",
    "large_unary",
    "client_streaming",
    "server_streaming",
    "ping_pong",
    "empty_stream",
    "timeout_on_sleeping_server",
    "cancel_after_begin",
    "cancel_after_first_response",
    "status_code_and_message",
    "special_status_message",
    "unimplemented_method",
    "unimplemented_service",
    "custom_metadata",
    "pick_first_unary",
    "rpc_soak",
    "channel_soak",
];

/// The interop client, installed under `target/` once; `None` (with the
/// reason printed) when Go is missing or the install fails.
fn client() -> Option<PathBuf> {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/grpc-go-interop");
    let bin = target.join("client");
    if bin.exists() {
        return Some(bin);
    }
    if Command::new("go").arg("version").output().is_err() {
        println!("SKIPPED: Go is not installed, so grpc-go's interop client cannot be built");
        return None;
    }
    let out = Command::new("go")
        .args([
            "install",
            &format!("google.golang.org/grpc/interop/client@{GRPC_GO}"),
        ])
        .env("GOBIN", &target)
        .output()
        .unwrap();
    if !out.status.success() {
        println!(
            "SKIPPED: `go install google.golang.org/grpc/interop/client@{GRPC_GO}` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    Some(bin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_go_interop_client_passes_every_applicable_case() {
    let Some(client) = tokio::task::spawn_blocking(client).await.unwrap() else {
        return;
    };
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(tram_examples::interop::server().serve_listener(listener, std::future::pending()));
    let mut failed = Vec::new();
    for case in CASES {
        let client = client.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(client)
                .args([
                    "--server_host=127.0.0.1",
                    &format!("--server_port={port}"),
                    &format!("--test_case={case}"),
                    "--soak_iterations=50",
                ])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        if out.status.success() {
            println!("{case}: passed");
        } else {
            let log = String::from_utf8_lossy(&out.stderr);
            let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
            println!("{case}: FAILED: {tail}");
            failed.push(*case);
        }
    }
    assert!(
        failed.is_empty(),
        "grpc-go interop cases failed: {failed:?}"
    );
}
