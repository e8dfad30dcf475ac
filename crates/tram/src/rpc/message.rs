//! Requests and responses: a message plus what travels with it.

use std::time::Duration;

use tokio::time::Instant;
use tram_wire::Metadata;

/// A request message with its metadata and time limit.
///
/// On the client, [`Request::with_timeout`] sets the time the call may take
/// (it travels on the wire). On the server, [`Request::deadline`] and
/// [`Request::time_left`] tell the handler how long the caller still waits.
#[derive(Debug, Clone, Default)]
pub struct Request<T> {
    message: T,
    metadata: Metadata,
    timeout: Option<Duration>,
    deadline: Option<Instant>,
    idempotent: bool,
}

impl<T> Request<T> {
    /// A request with no metadata and no timeout.
    pub fn new(message: T) -> Request<T> {
        Request {
            message,
            metadata: Metadata::new(),
            timeout: None,
            deadline: None,
            idempotent: false,
        }
    }

    /// Marks the call safe to repeat: with
    /// [`ChannelBuilder::retries`](crate::ChannelBuilder::retries) set, a
    /// call that failed before reaching a working server (connection
    /// refused or lost, `UNAVAILABLE` produced locally) is tried again.
    /// Calls are never retried otherwise.
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// Whether the call was marked [`Request::idempotent`].
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// Sets the request metadata (headers).
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// Sets the time the caller allows for the call (on the server, in
    /// place of the time left until the incoming call's deadline).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self.deadline = None;
        self
    }

    /// The request metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The message.
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, mutably.
    pub fn get_mut(&mut self) -> &mut T {
        &mut self.message
    }

    /// The message, by value.
    pub fn into_inner(self) -> T {
        self.message
    }

    /// The time the call may take: on the client, the timeout set with
    /// [`Request::with_timeout`]; on the server, the time left until the
    /// caller's deadline as of now, which is what a call made on its
    /// behalf with this request (or its parts) may take.
    pub fn timeout(&self) -> Option<Duration> {
        match self.deadline {
            // Read when asked, not as the request is made: most handlers
            // never ask, and then the clock is not read.
            Some(_) => self.time_left(),
            None => self.timeout,
        }
    }

    /// On the server: when the caller stops waiting.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// On the server: how long until the deadline (zero once it passed).
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
    }

    pub(crate) fn from_wire(message: T, metadata: Metadata, deadline: Option<Instant>) -> Self {
        Request {
            message,
            metadata,
            timeout: None,
            deadline,
            idempotent: false,
        }
    }

    /// The message, metadata and timeout ([`Request::timeout`]).
    pub fn into_parts(self) -> (T, Metadata, Option<Duration>) {
        let timeout = self.timeout();
        (self.message, self.metadata, timeout)
    }
}

/// A response message (or, for a streaming call, the message stream), with
/// the response's leading metadata (headers) and trailing metadata for the
/// call's end.
#[derive(Debug, Clone, Default)]
pub struct Response<T> {
    message: T,
    metadata: Metadata,
    trailers: Metadata,
}

impl<T> Response<T> {
    /// A response with no metadata.
    pub fn new(message: T) -> Response<T> {
        Response {
            message,
            metadata: Metadata::new(),
            trailers: Metadata::new(),
        }
    }

    /// Sets the leading metadata (headers), sent with the first response
    /// message; a call that ends without one sends it with its trailers.
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }

    /// The leading metadata (headers).
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Sets the trailing metadata sent with the call's end.
    pub fn with_trailers(mut self, trailers: Metadata) -> Self {
        self.trailers = trailers;
        self
    }

    /// The message.
    pub fn get_ref(&self) -> &T {
        &self.message
    }

    /// The message, by value.
    pub fn into_inner(self) -> T {
        self.message
    }

    /// The trailing metadata.
    pub fn trailers(&self) -> &Metadata {
        &self.trailers
    }

    /// The message, leading metadata and trailers.
    pub fn into_parts(self) -> (T, Metadata, Metadata) {
        (self.message, self.metadata, self.trailers)
    }
}

/// Anything a call accepts as its request: a message, or a [`Request`].
pub trait IntoRequest<T> {
    /// Wraps the message if needed.
    fn into_request(self) -> Request<T>;
}

impl<T> IntoRequest<T> for T {
    fn into_request(self) -> Request<T> {
        Request::new(self)
    }
}

impl<T> IntoRequest<T> for Request<T> {
    fn into_request(self) -> Request<T> {
        self
    }
}

/// Anything a streaming call accepts as its requests: a `Stream` of
/// messages, or a [`Request`] wrapping one (to set metadata or a timeout).
pub trait IntoStreamingRequest {
    /// The stream of requests.
    type Stream: futures_core::Stream<Item = Self::Message> + Send + 'static;
    /// One request message.
    type Message;

    /// Wraps the stream if needed.
    fn into_streaming_request(self) -> Request<Self::Stream>;
}

impl<S> IntoStreamingRequest for S
where
    S: futures_core::Stream + Send + 'static,
{
    type Stream = S;
    type Message = S::Item;

    fn into_streaming_request(self) -> Request<S> {
        Request::new(self)
    }
}

impl<S> IntoStreamingRequest for Request<S>
where
    S: futures_core::Stream + Send + 'static,
{
    type Stream = S;
    type Message = S::Item;

    fn into_streaming_request(self) -> Request<S> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the server a request's timeout is the time left until the
    /// caller's deadline when asked, so that a request passed on carries
    /// what is left; a timeout set on it replaces the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_server_requests_timeout_is_the_time_left_when_asked() {
        let deadline = Instant::now() + Duration::from_millis(100);
        let req = Request::from_wire((), Metadata::new(), Some(deadline));
        assert_eq!(req.timeout(), Some(Duration::from_millis(100)));
        tokio::time::advance(Duration::from_millis(30)).await;
        assert_eq!(req.timeout(), Some(Duration::from_millis(70)));
        assert_eq!(req.time_left(), Some(Duration::from_millis(70)));
        let (_, _, passed_on) = req.clone().into_parts();
        assert_eq!(passed_on, Some(Duration::from_millis(70)));
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(req.timeout(), Some(Duration::ZERO));

        let replaced = req.with_timeout(Duration::from_secs(1));
        assert_eq!(replaced.deadline(), None);
        tokio::time::advance(Duration::from_millis(30)).await;
        assert_eq!(replaced.timeout(), Some(Duration::from_secs(1)));
        assert_eq!(replaced.into_parts().2, Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_request_without_a_deadline_has_only_its_own_timeout() {
        let req = Request::new(()).with_timeout(Duration::from_millis(5));
        assert_eq!(req.timeout(), Some(Duration::from_millis(5)));
        assert_eq!(req.time_left(), None);
        assert_eq!(Request::new(()).timeout(), None);
    }
}
