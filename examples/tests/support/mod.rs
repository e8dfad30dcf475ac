//! Helpers the kv tests share.

use std::time::Duration;

use bytes::Bytes;
use tram_examples::proto::kv;

/// `fut`, or a panic naming `what` after 10 s.
pub(crate) async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A `Set` of `key` to `value`.
pub(crate) fn set(key: &str, value: &str) -> kv::SetRequest {
    kv::SetRequest {
        key: key.into(),
        value: Bytes::from(value.to_owned()),
    }
}
