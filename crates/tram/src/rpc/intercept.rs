//! Interceptors: code run as each call opens. On the server, to
//! authenticate and authorise (read the metadata and the peer's identity,
//! refuse with `UNAUTHENTICATED` or `PERMISSION_DENIED`); on the client, to
//! add metadata (a bearer token, a trace id) to every call.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tram_wire::Metadata;
use tram_wire::metadata::MetadataBuilder;

use super::Status;

/// What a server interceptor sees of a call as it opens.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CallInfo<'a> {
    /// `/package.Service/Method`.
    pub method: &'a str,
    /// The request's metadata.
    pub metadata: &'a Metadata,
    /// The client's address.
    pub peer: SocketAddr,
    /// The client's TLS certificate chain, leaf first (DER), when the
    /// connection is TLS with client authentication.
    pub peer_certificates: Option<&'a [Bytes]>,
}

type ServerFn = dyn Fn(&CallInfo<'_>) -> Result<(), Status> + Send + Sync;

/// A server interceptor: runs before a call's handler; an error ends the
/// call with that status instead (the handler never runs).
#[derive(Clone)]
pub(crate) struct ServerInterceptor(Arc<ServerFn>);

impl ServerInterceptor {
    /// Wraps `f`.
    pub(crate) fn new(
        f: impl Fn(&CallInfo<'_>) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        ServerInterceptor(Arc::new(f))
    }

    pub(crate) fn check(&self, call: &CallInfo<'_>) -> Result<(), Status> {
        (self.0)(call)
    }
}

impl fmt::Debug for ServerInterceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerInterceptor")
    }
}

type ClientFn = dyn Fn(&str, &mut MetadataBuilder) -> Result<(), Status> + Send + Sync;

/// A client interceptor: runs as each call opens, with the method's path
/// and a builder holding the request's metadata, to which it may add. An
/// error fails the call locally with that status (nothing is sent).
#[derive(Clone)]
pub(crate) struct ClientInterceptor(Arc<ClientFn>);

impl ClientInterceptor {
    /// Wraps `f`.
    pub(crate) fn new(
        f: impl Fn(&str, &mut MetadataBuilder) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        ClientInterceptor(Arc::new(f))
    }

    /// Adds `key: value` (an ASCII entry) to every call: the usual bearer
    /// token is `ClientInterceptor::header("authorization", "Bearer ...")`.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` status when the key or value breaks metadata
    /// rules (checked once, here).
    pub(crate) fn header(key: &str, value: &str) -> Result<Self, Status> {
        // Validate now, so that a bad header fails at configuration time.
        Metadata::builder()
            .ascii(key, value)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let (key, value) = (key.to_owned(), value.to_owned());
        Ok(ClientInterceptor::new(move |_, md| {
            md.ascii(&key, &value)
                .map(|_| ())
                .map_err(|e| Status::invalid_argument(e.to_string()))
        }))
    }

    pub(crate) fn apply(&self, method: &str, metadata: Metadata) -> Result<Metadata, Status> {
        let mut md = metadata.to_builder();
        (self.0)(method, &mut md)?;
        Ok(md.build())
    }
}

impl fmt::Debug for ClientInterceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientInterceptor")
    }
}
