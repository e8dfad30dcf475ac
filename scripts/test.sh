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
