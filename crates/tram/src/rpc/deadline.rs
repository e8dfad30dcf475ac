//! A call's deadline, the same on both sides: the client sets it from the
//! request's timeout before anything is sent, the server from the CALL's
//! timeout as the call arrives; either way the call ends with
//! `DEADLINE_EXCEEDED` when it passes.

use std::time::Duration;

use tokio::time::Instant;

use super::Status;

/// The deadline `timeout` from now, if there is a timeout.
pub(crate) fn after(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now() + t)
}

/// The time left until `deadline` (zero once it passed).
pub(crate) fn left(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// Runs `fut` until `deadline`; past it, the call fails with
/// `DEADLINE_EXCEEDED` (and `fut` is dropped).
///
/// The timer is boxed: a call without a deadline (most of them) carries no
/// timer state in its future, which every call of its method allocates.
pub(crate) async fn within<T>(
    deadline: Option<Instant>,
    fut: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match deadline {
        None => fut.await,
        Some(d) => Box::pin(tokio::time::timeout_at(d, fut))
            .await
            .unwrap_or_else(|_| Err(exceeded())),
    }
}

/// The status of a call whose deadline passed.
pub(crate) fn exceeded() -> Status {
    Status::deadline_exceeded("deadline exceeded")
}
