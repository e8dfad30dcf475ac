//! The Connect protocol (connectrpc.com/docs/protocol): status codes and
//! their HTTP statuses, the JSON error body, metadata as headers (trailers
//! as `trailer-` headers in unary responses), envelopes and the end of a
//! stream.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use bytes::{Buf as _, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use tram::{Code, Metadata, Status};

/// Connect's name of a status code.
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "canceled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The HTTP status of a unary error with `code`.
pub(crate) fn http_status(code: Code) -> StatusCode {
    let n = match code {
        Code::Cancelled => 499,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
        Code::DeadlineExceeded => 504,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::PermissionDenied => 403,
        Code::ResourceExhausted => 429,
        Code::Unimplemented => 501,
        Code::Unavailable => 503,
        Code::Unauthenticated => 401,
        _ => 500,
    };
    StatusCode::from_u16(n).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// `google.rpc.Status`, the form of gRPC's status details.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<prost_types::Any>,
}

/// The JSON of an error: `{"code": ..., "message": ..., "details": [...]}`
/// (the details unpacked from a `google.rpc.Status` in the status's
/// details, if it holds one).
pub(crate) fn error_json(status: &Status) -> serde_json::Value {
    let mut error = serde_json::json!({ "code": code_name(status.code()) });
    if !status.message().is_empty() {
        error["message"] = status.message().into();
    }
    if let Ok(rpc) = <RpcStatus as prost::Message>::decode(status.details().clone()) {
        let details: Vec<_> = rpc
            .details
            .iter()
            .map(|any| {
                let ty = any.type_url.rsplit('/').next().unwrap_or(&any.type_url);
                serde_json::json!({ "type": ty, "value": STANDARD_NO_PAD.encode(&any.value) })
            })
            .collect();
        if !details.is_empty() {
            error["details"] = details.into();
        }
    }
    error
}

/// Metadata as JSON (`{"key": ["value", ...]}`), for the end of a stream.
fn metadata_json(md: &Metadata) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for (key, value) in md.iter() {
        let value = if key.ends_with("-bin") {
            STANDARD.encode(value)
        } else {
            String::from_utf8_lossy(value).into_owned()
        };
        match map
            .entry(key.to_owned())
            .or_insert_with(|| serde_json::json!([]))
        {
            serde_json::Value::Array(values) => values.push(value.into()),
            _ => unreachable!("values are arrays"),
        }
    }
    serde_json::Value::Object(map)
}

/// The EndStream message of a Connect stream: the error if any, and the
/// trailers.
pub(crate) fn end_stream(status: &Status) -> Bytes {
    let mut end = serde_json::json!({});
    if status.code() != Code::Ok {
        end["error"] = error_json(status);
    }
    if !status.trailers().is_empty() {
        end["metadata"] = metadata_json(status.trailers());
    }
    envelope(0x02, &serde_json::to_vec(&end).unwrap_or_default())
}

/// An envelope: flags, a 32-bit length, the data.
pub(crate) fn envelope(flags: u8, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + data.len());
    out.put_u8(flags);
    out.put_u32(data.len() as u32);
    out.put_slice(data);
    out.freeze()
}

/// Trailers of a unary response, as `trailer-` headers.
pub(crate) fn trailers_as_headers(md: &Metadata, headers: &mut HeaderMap) {
    let mut trailers = HeaderMap::new();
    crate::wire::metadata_to_headers(md, &mut trailers);
    for (name, value) in &trailers {
        if let Ok(name) = HeaderName::from_bytes(format!("trailer-{name}").as_bytes()) {
            headers.append(name, value.clone());
        }
    }
}

/// `Connect-Timeout-Ms`: at most ten digits.
pub(crate) fn timeout(headers: &HeaderMap) -> Result<Option<std::time::Duration>, Status> {
    let Some(v) = headers.get("connect-timeout-ms") else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .filter(|s| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .map(|ms| Some(std::time::Duration::from_millis(ms)))
        .ok_or_else(|| Status::invalid_argument("bad connect-timeout-ms"))
}

/// The parts of a unary GET request's query.
pub(crate) struct GetQuery {
    pub(crate) message: Bytes,
    pub(crate) json: bool,
    pub(crate) gzip: bool,
}

/// Parses a unary GET's query: `connect=v1`, `encoding=json|proto`,
/// `message=...` (percent-encoded, or unpadded base64url with
/// `base64=1`), `compression=gzip|identity`.
pub(crate) fn get_query(query: &str) -> Result<GetQuery, Status> {
    let (mut message, mut json, mut base64, mut gzip) = (None, None, false, false);
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_encoding::percent_decode_str(v).collect::<Vec<u8>>();
        match k {
            "message" => message = Some(v),
            "encoding" => json = Some(v == b"json"),
            "base64" => base64 = v == b"1",
            "compression" => gzip = v == b"gzip",
            _ => {}
        }
    }
    let json = json.ok_or_else(|| Status::invalid_argument("GET needs encoding=json|proto"))?;
    let mut message = message.unwrap_or_default();
    if base64 {
        let trimmed: Vec<u8> = message.iter().copied().filter(|b| *b != b'=').collect();
        message = URL_SAFE_NO_PAD
            .decode(trimmed)
            .map_err(|e| Status::invalid_argument(format!("message is not base64url: {e}")))?;
    }
    Ok(GetQuery {
        message: message.into(),
        json,
        gzip,
    })
}

/// The headers of a unary error response.
pub(crate) fn error_headers(status: &Status) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    trailers_as_headers(status.trailers(), &mut h);
    h
}

/// The messages of a Connect streaming request body.
pub(crate) fn envelopes(mut body: Bytes, max: usize, gzip: bool) -> Result<Vec<Bytes>, Status> {
    let mut out = Vec::new();
    while !body.is_empty() {
        if body.len() < 5 {
            return Err(Status::invalid_argument(
                "request body ends inside an envelope",
            ));
        }
        let flags = body[0];
        let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if len > max {
            return Err(Status::resource_exhausted("request message too large"));
        }
        if body.len() < 5 + len {
            return Err(Status::invalid_argument(
                "request body ends inside an envelope",
            ));
        }
        body.advance(5);
        let data = body.split_to(len);
        if flags & 0x02 != 0 {
            break;
        }
        out.push(if flags & 0x01 != 0 {
            if !gzip {
                return Err(Status::internal("compressed envelope without an encoding"));
            }
            super::render::gunzip(&data, max)?
        } else {
            data
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_connect_names_statuses_and_json() {
        let s = Status::not_found("no such key");
        assert_eq!(http_status(s.code()), StatusCode::NOT_FOUND);
        assert_eq!(
            error_json(&s),
            serde_json::json!({"code": "not_found", "message": "no such key"})
        );
        assert_eq!(http_status(Code::ResourceExhausted).as_u16(), 429);
        assert_eq!(code_name(Code::Cancelled), "canceled");
    }

    #[test]
    fn get_queries_decode_both_ways() {
        let q = get_query("connect=v1&encoding=json&message=%7B%22key%22%3A%22a%22%7D").unwrap();
        assert!(q.json);
        assert_eq!(&q.message[..], br#"{"key":"a"}"#);
        let q = get_query("encoding=proto&base64=1&message=CgFh").unwrap();
        assert!(!q.json);
        assert_eq!(&q.message[..], b"\x0a\x01a");
        assert!(get_query("message=x").is_err());
    }

    #[test]
    fn timeouts_are_at_most_ten_digits() {
        let mut h = HeaderMap::new();
        h.insert("connect-timeout-ms", HeaderValue::from_static("1500"));
        assert_eq!(
            timeout(&h).unwrap(),
            Some(std::time::Duration::from_millis(1500))
        );
        h.insert(
            "connect-timeout-ms",
            HeaderValue::from_static("12345678901"),
        );
        assert!(timeout(&h).is_err());
    }

    #[test]
    fn the_end_of_a_stream_carries_the_error_and_trailers() {
        let md = Metadata::builder().ascii("x-done", "yes").unwrap().build();
        let end = end_stream(&Status::unavailable("gone").with_trailers(md));
        assert_eq!(end[0], 0x02);
        let json: serde_json::Value = serde_json::from_slice(&end[5..]).unwrap();
        assert_eq!(json["error"]["code"], "unavailable");
        assert_eq!(json["metadata"]["x-done"][0], "yes");
    }
}
