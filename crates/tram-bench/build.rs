//! Generates tonic's echo service (the gRPC side of `compare`, and the
//! message protosocket-rpc sends) and tram-build's echo message (tram's
//! side) from `proto/echo.proto`, compiled with protox: no system protoc.

fn main() -> std::io::Result<()> {
    let fds = protox::compile(["proto/echo.proto"], ["proto"])
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    // The descriptors, for the gateway's Connect JSON.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").map_err(std::io::Error::other)?);
    std::fs::write(
        out.join("echo_fds.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    // The cargo profile this binary is built with (`release`, `lto`, ...),
    // for the result files. Cargo's PROFILE says only `release` or `debug`
    // (a custom profile reports the one it inherits), so the name is taken
    // from the directory `build/` lies in, in OUT_DIR
    // (`target/[<triple>/]<profile>/build/<crate>/out`).
    let profile = out
        .ancestors()
        .find(|dir| dir.ends_with("build"))
        .and_then(std::path::Path::parent)
        .and_then(std::path::Path::file_name)
        .and_then(|name| name.to_str())
        .unwrap_or("unknown");
    println!("cargo:rustc-env=TRAM_BENCH_PROFILE={profile}");
    println!("cargo:rustc-env=TRAM_BENCH_SOURCE={}", source_revision());
    let mut config = prost_build::Config::new();
    config.bytes(["."]);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds_with_config(fds, config)?;
    // tram's side of the bench uses the messages a tram user gets:
    // tram-build's, whose `bytes` fields encode without a reference count.
    let tram = out.join("tram");
    std::fs::create_dir_all(&tram)?;
    tram_build::Builder::new()
        .client(false)
        .server(false)
        .out_dir(&tram)
        .compile(&["proto/echo.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/echo.proto");
    Ok(())
}

/// The commit the workspace's crates are built from, `-modified` when
/// they differ from it, for the result files: a binary left over from
/// another tree's build (cargo keys a workspace crate by its path inside
/// the workspace, so a worktree sharing the target directory can leave
/// one that counts as built) says so. `unknown` outside a git checkout.
fn source_revision() -> String {
    let git = |args: &[&str]| -> Option<String> {
        let out = std::process::Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let Some(root) = git(&["rev-parse", "--show-toplevel"]) else {
        return "unknown".into();
    };
    // Rebuilt when a crate's source, the lock file, or the commit moves.
    println!("cargo:rerun-if-changed={root}/crates");
    println!("cargo:rerun-if-changed={root}/Cargo.lock");
    for path in ["HEAD", "index", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &head])
    {
        println!("cargo:rerun-if-changed={p}");
    }
    let Some(rev) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    let changed = git(&[
        "-C",
        &root,
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        "crates",
        "Cargo.lock",
    ])
    .is_some_and(|s| !s.is_empty());
    if changed {
        format!("{rev}-modified")
    } else {
        rev
    }
}
