#!/usr/bin/env bash
# Runs every check and test of the workspace: the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --all-features --quiet -- -D warnings

echo "== cargo doc (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --quiet

echo "== cargo test"
cargo test --workspace --all-targets --all-features --quiet
cargo test --workspace --doc --all-features --quiet

echo "== go/ (the Go implementation)"
if command -v go >/dev/null 2>&1; then
  (
    cd go
    unformatted=$(gofmt -l .)
    if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted" >&2; exit 1; fi
    go vet ./...
    # The kv cases run against the Rust server in examples/tests/go_client.rs.
    go test -count=1 -timeout 300s ./...
    # Code generation (google.golang.org/protobuf, from the Go proxy).
    (cd gen && go vet ./... && go test -count=1 -timeout 300s ./...)
    # The benchmark against grpc-go compiles (running it: go/bench's doc).
    (cd bench && go vet ./...)
  )
else
  echo "Go is not installed: go/ is not tested here (examples/tests/go_client.rs skips too)"
fi
