//! Connect and gRPC-Web requests that arrive on the gateway's HTTP/2
//! connections: the request body read through h2 (its flow-control window
//! released as it is read), the answer written back as it comes, within
//! the peer's window.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::RecvStream;
use h2::server::SendResponse;
use http::Request as HttpRequest;
use http_body_util::BodyExt as _;
use tram::Channel;

use super::Web;

/// An h2 request body as an `http_body::Body`.
struct H2Body(RecvStream);

impl http_body::Body for H2Body {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, h2::Error>>> {
        match self.0.poll_data(cx) {
            Poll::Ready(Some(Ok(data))) => {
                let _ = self.0.flow_control().release_capacity(data.len());
                Poll::Ready(Some(Ok(http_body::Frame::data(data))))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Answers one Connect or gRPC-Web request of an HTTP/2 connection.
pub(crate) async fn serve(
    web: &Web,
    request: HttpRequest<RecvStream>,
    mut respond: SendResponse<Bytes>,
    peer: SocketAddr,
    channel: &Channel,
) {
    let request = request.map(H2Body);
    let response = web.handle(request, peer, channel).await;
    let (parts, mut body) = response.into_parts();
    let head = http::Response::from_parts(parts, ());
    let Ok(mut stream) = respond.send_response(head, false) else {
        return;
    };
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame;
        let Ok(mut data) = frame.into_data() else {
            continue;
        };
        while !data.is_empty() {
            stream.reserve_capacity(data.len());
            let granted = match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(Ok(n)) => n,
                _ => return,
            };
            let n = granted.min(data.len());
            if stream.send_data(data.split_to(n), false).is_err() {
                return;
            }
        }
    }
    let _ = stream.send_data(Bytes::new(), true);
}
