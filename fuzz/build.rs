//! The flat_message target's messages: `examples/proto/fields.proto` from
//! tram-build (its own codec for flat messages) and from plain prost-build,
//! compiled with protox (no system protoc).
fn main() -> std::io::Result<()> {
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").map_err(std::io::Error::other)?);
    let (tram, prost) = (out.join("tram"), out.join("prost"));
    std::fs::create_dir_all(&tram)?;
    std::fs::create_dir_all(&prost)?;
    let proto = "../examples/proto/fields.proto";
    let include = "../examples/proto";
    tram_build::Builder::new()
        .client(false)
        .server(false)
        .out_dir(&tram)
        .compile(&[proto], &[include])?;
    let fds =
        protox::compile([proto], [include]).map_err(|e| std::io::Error::other(e.to_string()))?;
    prost_build::Config::new()
        .bytes(["."])
        .out_dir(&prost)
        .compile_fds(fds)?;
    println!("cargo:rerun-if-changed={proto}");
    Ok(())
}
