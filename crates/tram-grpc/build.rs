//! Generates the standard gRPC services (reflection v1 and v1alpha,
//! health) with tram-build, from proto/ (protox: no system protoc).
fn main() -> std::io::Result<()> {
    tram_build::compile_protos(
        &[
            "proto/grpc/reflection/v1/reflection.proto",
            "proto/grpc/reflection/v1alpha/reflection.proto",
            "proto/grpc/health/v1/health.proto",
        ],
        &["proto"],
    )
}
