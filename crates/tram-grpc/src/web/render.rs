//! A call's answer in the web protocols' forms: a Connect unary response
//! (the message as the body, or the error as JSON with its HTTP status),
//! or a streamed body (Connect envelopes or gRPC-Web frames) ending with
//! the status, written as the tram stream yields its messages.

use std::convert::Infallible;
use std::io::Read as _;

use bytes::Bytes;
use futures_core::Stream;
use http::{HeaderValue, Response as HttpResponse};
use http_body_util::{BodyExt as _, Full, StreamBody};
use tram::gateway::RawMessage;
use tram::{Code, Metadata, Response, Status, Streaming};

use super::{WebBody, Wire, connect, grpcweb};
use crate::wire;

/// What the tram method answered.
pub(super) enum Answer {
    One(Result<Response<RawMessage>, Status>),
    Stream(Result<Streaming<RawMessage>, Status>),
}

/// OK, with these trailers.
pub(super) fn tram_ok(trailers: Metadata) -> Status {
    Status::new(Code::Ok, "").with_trailers(trailers)
}

pub(super) fn empty() -> WebBody {
    Full::new(Bytes::new()).boxed_unsync()
}

pub(super) fn full(b: Bytes) -> WebBody {
    Full::new(b).boxed_unsync()
}

/// A Connect unary answer.
pub(super) fn connect_unary(
    json: bool,
    outcome: Result<Response<RawMessage>, Status>,
    encode: impl Fn(Bytes) -> Result<Bytes, Status>,
    gzip: bool,
) -> HttpResponse<WebBody> {
    let resp = outcome.and_then(|r| {
        let (m, h, t) = r.into_parts();
        Ok((encode(m.0)?, h, t))
    });
    match resp {
        Ok((body, headers, trailers)) => {
            let (body, gzipped) = maybe_gzip(body, gzip);
            let mut response = HttpResponse::new(full(body));
            let h = response.headers_mut();
            let ct = if json {
                "application/json"
            } else {
                "application/proto"
            };
            h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static(ct));
            if gzipped {
                h.insert(
                    http::header::CONTENT_ENCODING,
                    HeaderValue::from_static("gzip"),
                );
            }
            wire::metadata_to_headers(&headers, h);
            connect::trailers_as_headers(&trailers, h);
            response
        }
        Err(status) => render_error(Wire::ConnectUnary { json }, &status),
    }
}

/// An error before (or instead of) any answer, in `wire`'s form.
pub(super) fn render_error(form: Wire, status: &Status) -> HttpResponse<WebBody> {
    match form {
        Wire::ConnectUnary { .. } => {
            let body = serde_json::to_vec(&connect::error_json(status)).unwrap_or_default();
            let mut response = HttpResponse::new(full(body.into()));
            *response.status_mut() = connect::http_status(status.code());
            *response.headers_mut() = connect::error_headers(status);
            response
        }
        form => stream_response(form, Metadata::new(), None, None, status.clone(), Ok, false),
    }
}

/// A streamed answer (Connect streaming or gRPC-Web): the headers with
/// `headers`, then `first` and the rest of `rest`, then the end with
/// `end` (or the stream's own end).
pub(super) fn stream_response(
    form: Wire,
    headers: Metadata,
    first: Option<Result<Bytes, Status>>,
    rest: Option<Streaming<RawMessage>>,
    end: Status,
    encode: impl Fn(Bytes) -> Result<Bytes, Status> + Send + 'static,
    gzip: bool,
) -> HttpResponse<WebBody> {
    let content_type = match form {
        Wire::ConnectStream { json: true } => "application/connect+json",
        Wire::ConnectStream { json: false } => "application/connect+proto",
        Wire::GrpcWeb { text: true } => "application/grpc-web-text+proto",
        Wire::GrpcWeb { text: false } | Wire::ConnectUnary { .. } => "application/grpc-web+proto",
    };
    let frames = frames(form, first, rest, end, encode, gzip);
    let mut response = HttpResponse::new(StreamBody::new(frames).boxed_unsync());
    let h = response.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    if gzip {
        let name = if matches!(form, Wire::GrpcWeb { .. }) {
            "grpc-encoding"
        } else {
            "connect-content-encoding"
        };
        h.insert(name, HeaderValue::from_static("gzip"));
    }
    wire::metadata_to_headers(&headers, h);
    response
}

/// The body of a streamed answer, frame by frame, as the tram stream
/// yields its messages: no task of its own, polled by the connection.
pub(super) fn frames(
    form: Wire,
    first: Option<Result<Bytes, Status>>,
    rest: Option<Streaming<RawMessage>>,
    end: Status,
    encode: impl Fn(Bytes) -> Result<Bytes, Status> + Send + 'static,
    gzip: bool,
) -> impl Stream<Item = Result<http_body::Frame<Bytes>, Infallible>> + Send {
    struct State<E> {
        first: Option<Result<Bytes, Status>>,
        rest: Option<Streaming<RawMessage>>,
        end: Option<Status>,
        encode: E,
    }
    let state = State {
        first,
        rest,
        end: Some(end),
        encode,
    };
    let text = matches!(form, Wire::GrpcWeb { text: true });
    let frame = move |data: Bytes| {
        let data = if text {
            grpcweb::encode_text(&data)
        } else {
            data
        };
        http_body::Frame::data(data)
    };
    futures_util::stream::unfold(state, move |mut st| async move {
        st.end.as_ref()?;
        let next = match st.first.take() {
            Some(m) => Some(m),
            None => match st.rest.as_mut() {
                Some(rest) => match rest.message().await {
                    Ok(Some(m)) => Some(Ok(m.0)),
                    Ok(None) => {
                        let trailers = rest.trailers().unwrap_or_default();
                        st.end = Some(tram_ok(trailers));
                        None
                    }
                    Err(s) => Some(Err(s)),
                },
                None => None,
            },
        };
        match next.map(|m| m.and_then(|m| (st.encode)(m))) {
            Some(Ok(msg)) => {
                let data = match form {
                    Wire::GrpcWeb { .. } => wire::frame(&msg, gzip),
                    _ => {
                        let (body, gzipped) = maybe_gzip(msg, gzip);
                        connect::envelope(u8::from(gzipped), &body)
                    }
                };
                Some((Ok(frame(data)), st))
            }
            Some(Err(s)) => {
                st.rest = None;
                st.end = None;
                Some((Ok(frame(end_frame(form, &s))), st))
            }
            None => {
                let end = st.end.take()?;
                Some((Ok(frame(end_frame(form, &end))), st))
            }
        }
    })
}

/// The frame that ends a streamed answer.
pub(super) fn end_frame(form: Wire, status: &Status) -> Bytes {
    match form {
        Wire::GrpcWeb { .. } => grpcweb::trailer_frame(status),
        _ => connect::end_stream(status),
    }
}

/// `data`, gunzipped, at most `max` bytes of it.
pub(super) fn gunzip(data: &[u8], max: usize) -> Result<Bytes, Status> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(data)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Status::invalid_argument(format!("bad gzip: {e}")))?;
    if out.len() > max {
        return Err(Status::resource_exhausted("request message too large"));
    }
    Ok(out.into())
}

/// `body` gzipped when `gzip` and worth it; whether it was.
pub(super) fn maybe_gzip(body: Bytes, gzip: bool) -> (Bytes, bool) {
    if !gzip || body.len() < 512 {
        return (body, false);
    }
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    match enc.write_all(&body).and_then(|()| enc.finish()) {
        Ok(z) => (z.into(), true),
        Err(_) => (body, false),
    }
}
