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
