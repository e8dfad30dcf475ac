//! Generates the kv and echo services from proto/ with tram-build.
fn main() -> std::io::Result<()> {
    tram_build::compile_protos(&["proto/kv.proto", "proto/echo.proto"], &["proto"])
}
