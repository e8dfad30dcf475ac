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

/// What a channel adds to each call as it opens: headers set once
/// ([`ChannelBuilder::header`](crate::ChannelBuilder::header)), then a
/// function run with the method's path and a builder holding the request's
/// metadata, to which it may add. An error from the function fails the
/// call locally with that status (nothing is sent).
#[derive(Clone, Default)]
pub(crate) struct ClientInterceptor {
    /// The headers, checked and encoded once as they were set: a call
    /// copies them as they are (or only shares them, when it has no
    /// metadata of its own).
    headers: Metadata,
    f: Option<Arc<ClientFn>>,
}

impl ClientInterceptor {
    /// Runs `f` as each call opens (in place of any function before).
    pub(crate) fn with_fn(
        self,
        f: impl Fn(&str, &mut MetadataBuilder) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        ClientInterceptor {
            f: Some(Arc::new(f)),
            ..self
        }
    }

    /// Adds `key: value` (an ASCII entry) to every call, after the
    /// headers added before.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` status when the key or value breaks metadata
    /// rules (checked once, here).
    pub(crate) fn with_header(self, key: &str, value: &str) -> Result<Self, Status> {
        let mut headers = self.headers.to_builder();
        headers
            .ascii(key, value)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(ClientInterceptor {
            headers: headers.build(),
            ..self
        })
    }

    pub(crate) fn apply(&self, method: &str, metadata: Metadata) -> Result<Metadata, Status> {
        let Some(f) = &self.f else {
            return Ok(metadata.concat(&self.headers));
        };
        let mut md = metadata.to_builder();
        md.extend(&self.headers);
        f(method, &mut md)?;
        Ok(md.build())
    }
}

impl fmt::Debug for ClientInterceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientInterceptor")
    }
}
