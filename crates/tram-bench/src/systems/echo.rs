//! The unary echo service (`uint64 id = 1; bytes payload = 2;`), as tonic
//! generates it from `proto/echo.proto`, which protosocket-rpc sends too;
//! tram serves and calls the same message as tram-build generates it.

/// tonic's generated code.
#[allow(clippy::all, missing_docs, unreachable_pub)]
pub(crate) mod pb {
    tonic::include_proto!("bench");
}

pub(crate) use pb::EchoMessage;

/// tram-build's code for the same message: what tram serves and calls.
#[allow(clippy::all, missing_docs, unreachable_pub)]
pub(crate) mod tram_pb {
    include!(concat!(env!("OUT_DIR"), "/tram/bench.rs"));
}

/// The unary echo method.
pub(crate) const PATH: &str = "/bench.Echo/Say";

/// tram's server-streaming method: copies of the request, as long as the
/// client reads.
pub(crate) const STREAM_PATH: &str = "/bench.Echo/Stream";
