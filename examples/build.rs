//! Generates the kv, echo and gRPC interop services from proto/ with
//! tram-build, and (for the interop tests' gRPC client) tonic's client of
//! the interop service, all compiled with protox: no system protoc.
fn main() -> std::io::Result<()> {
    tram_build::compile_protos(
        &[
            "proto/kv.proto",
            "proto/echo.proto",
            "proto/grpc/testing/test.proto",
        ],
        &["proto"],
    )?;
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
