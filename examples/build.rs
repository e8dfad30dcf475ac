//! Generates the kv, echo and gRPC interop services from proto/ with
//! tram-build (the echo twice: once more with `Say` as a plain function,
//! `sync_unary`), the `bytes` fields test's messages with both tram-build
//! and prost-build, and (for the interop tests' gRPC client) tonic's client
//! of the interop service, all compiled with protox: no system protoc.
fn main() -> std::io::Result<()> {
    tram_build::compile_protos(
        &[
            "proto/kv.proto",
            "proto/echo.proto",
            "proto/grpc/testing/test.proto",
        ],
        &["proto"],
    )?;
    let out_dir = std::env::var("OUT_DIR").map_err(std::io::Error::other)?;
    let sync = std::path::PathBuf::from(&out_dir).join("sync");
    std::fs::create_dir_all(&sync)?;
    tram_build::Builder::new()
        .out_dir(&sync)
        .sync_unary(["echo.Echo.Say"])
        .compile(&["proto/echo.proto"], &["proto"])?;
    // tests/bytes_fields.rs: the same messages from tram-build (as it
    // writes them by default, and for plain prost) and from prost-build,
    // to compare their encodings (apart from the descriptors above, which
    // the Go generator's tests read).
    let fields = std::path::PathBuf::from(&out_dir).join("fields");
    std::fs::create_dir_all(&fields)?;
    tram_build::Builder::new()
        .out_dir(&fields)
        .compile(&["proto/fields.proto"], &["proto"])?;
    let plain_tram = std::path::PathBuf::from(&out_dir).join("plain");
    std::fs::create_dir_all(&plain_tram)?;
    tram_build::Builder::new()
        .plain_prost(true)
        .out_dir(&plain_tram)
        .compile(&["proto/fields.proto"], &["proto"])?;
    let plain = std::path::PathBuf::from(&out_dir).join("prost");
    std::fs::create_dir_all(&plain)?;
    let fds = protox::compile(["proto/fields.proto"], ["proto"])
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    prost_build::Config::new()
        .bytes(["."])
        .out_dir(&plain)
        .compile_fds(fds)?;
    let fds = protox::compile(["proto/grpc/testing/test.proto"], ["proto"])
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").map_err(std::io::Error::other)?)
        .join("tonic");
    std::fs::create_dir_all(&out)?;
    let mut config = prost_build::Config::new();
    config.bytes(["."]);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .out_dir(&out)
        .compile_fds_with_config(fds, config)?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
