//! Connect unary JSON over HTTP/1.1: tram's gateway (the echo's protobuf
//! message mapped to and from JSON through its descriptors) next to a
//! reference, axum 0.8 with a serde handler of the same JSON; both called
//! by one HTTP/1.1 client (hyper's pooled client: a connection per call
//! in flight, kept alive).

use std::net::SocketAddr;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

use super::echo::PATH;

/// The echo message as protobuf's JSON mapping writes it (`uint64` as a
/// string, `bytes` as base64).
#[derive(serde::Serialize, serde::Deserialize)]
struct EchoJson {
    #[serde(default)]
    id: String,
    #[serde(default)]
    payload: String,
}

/// axum's echo: the JSON parsed (the payload base64-decoded, as a real
/// handler would need its bytes) and written back.
async fn echo(
    axum::Json(m): axum::Json<EchoJson>,
) -> Result<axum::Json<EchoJson>, axum::http::StatusCode> {
    let bytes = STANDARD
        .decode(&m.payload)
        .map_err(|_| axum::http::StatusCode::BAD_REQUEST)?;
    let id: u64 = m.id.parse().unwrap_or_default();
    Ok(axum::Json(EchoJson {
        id: id.to_string(),
        payload: STANDARD.encode(bytes),
    }))
}

/// Serves axum's JSON echo at the echo's path until aborted.
pub(super) async fn serve_axum(listener: TcpListener) -> anyhow::Result<()> {
    let app = axum::Router::new().route(PATH, axum::routing::post(echo));
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}

/// An HTTP/1.1 JSON client of the echo.
#[derive(Clone)]
pub(crate) struct JsonClient {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: hyper::Uri,
}

impl JsonClient {
    pub(super) fn new(addr: SocketAddr) -> anyhow::Result<JsonClient> {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(usize::MAX)
            .build(connector);
        Ok(JsonClient {
            client,
            uri: format!("http://{addr}{PATH}").parse()?,
        })
    }

    /// One call: the id the answer carries.
    pub(super) async fn call(&self, id: u64, payload: &[u8]) -> anyhow::Result<u64> {
        let body = serde_json::to_vec(&EchoJson {
            id: id.to_string(),
            payload: STANDARD.encode(payload),
        })?;
        let request = hyper::Request::post(self.uri.clone())
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let response = self.client.request(request).await?;
        anyhow::ensure!(response.status().is_success(), "HTTP {}", response.status());
        let body = response.into_body().collect().await?.to_bytes();
        let m: EchoJson = serde_json::from_slice(&body)?;
        // Protobuf's JSON leaves out fields at their default: no id is 0.
        Ok(if m.id.is_empty() { 0 } else { m.id.parse()? })
    }
}
