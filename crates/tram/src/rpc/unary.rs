//! A single response as frames bring it: MESSAGE with END_STREAM, or
//! MESSAGE then END with trailers, or an END alone with an error status.
//! The client collects each unary call's answer with it; the server's
//! in-process calls (for gateways) read a handler's answer the same way.

use bytes::Bytes;
use tram_wire::{Code, End, Metadata};

use super::{Response, Status};

/// A unary call's answer: the response message, its leading metadata (if
/// any) and the trailers.
pub(crate) type Answer = (Bytes, Option<Metadata>, Metadata);

/// The frames of one single-response call, collected.
#[derive(Debug, Default)]
pub(crate) struct UnaryAnswer {
    /// The response message and its leading metadata (boxed: seldom
    /// sent, and this lives in the client's call table, where every byte
    /// of an entry is a line that moves between cores; `calls`).
    body: Option<(Bytes, Option<Box<Metadata>>)>,
    /// The call's end, with its trailers (boxed, for the same reason).
    end: Option<Result<Option<Box<Metadata>>, Status>>,
}

/// The peer sent a second response message.
#[derive(Debug)]
pub(crate) struct TwoResponses;

impl UnaryAnswer {
    /// A MESSAGE frame; with `end_stream` it also ends the call (OK, no
    /// trailers).
    pub(crate) fn message(
        &mut self,
        payload: Bytes,
        metadata: Option<Metadata>,
        end_stream: bool,
    ) -> Result<(), TwoResponses> {
        if self.body.is_some() {
            return Err(TwoResponses);
        }
        self.body = Some((payload, metadata.map(Box::new)));
        if end_stream {
            self.end = Some(Ok(None));
        }
        Ok(())
    }

    /// The call's END frame.
    pub(crate) fn end(&mut self, end: End) {
        self.end = Some(if end.code == Code::Ok {
            Ok(end.trailers.filter(|t| !t.is_empty()).map(Box::new))
        } else {
            Err(Status::from_wire(end))
        });
    }

    /// The call failed here (connection lost, cancelled); an outcome
    /// already in is kept.
    pub(crate) fn fail(&mut self, why: &Status) {
        self.end.get_or_insert_with(|| Err(why.clone()));
    }

    /// Whether the call has ended.
    pub(crate) fn is_done(&self) -> bool {
        self.end.is_some()
    }

    /// The outcome, once the call has ended.
    pub(crate) fn take(&mut self) -> Option<Result<Answer, Status>> {
        Some(match self.end.take()? {
            Ok(trailers) => self
                .body
                .take()
                .map(|(body, headers)| {
                    (
                        body,
                        headers.map(|h| *h),
                        trailers.map_or_else(Metadata::new, |t| *t),
                    )
                })
                .ok_or_else(|| Status::internal("call ended without a response message")),
            Err(status) => Err(status),
        })
    }
}

/// An answer decoded into the response type.
pub(crate) fn decode<Resp: prost::Message + Default>(
    outcome: Result<Answer, Status>,
) -> Result<Response<Resp>, Status> {
    let (body, headers, trailers) = outcome?;
    let resp = Resp::decode(body)
        .map_err(|e| Status::internal(format!("response does not decode: {e}")))?;
    let resp = Response::new(resp).with_trailers(trailers);
    Ok(match headers {
        Some(h) => resp.with_metadata(h),
        None => resp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_with_end_stream_is_a_whole_answer() {
        let mut a = UnaryAnswer::default();
        assert!(a.take().is_none());
        a.message(Bytes::from_static(b"hi"), None, true).unwrap();
        let (body, headers, trailers) = a.take().unwrap().unwrap();
        assert_eq!(&body[..], b"hi");
        assert!(headers.is_none() && trailers.is_empty());
    }

    #[test]
    fn trailers_come_with_end_and_a_second_message_is_refused() {
        let mut a = UnaryAnswer::default();
        a.message(Bytes::from_static(b"hi"), None, false).unwrap();
        assert!(!a.is_done());
        assert!(a.message(Bytes::new(), None, true).is_err());
        let trailers = Metadata::builder().ascii("k", "v").unwrap().build();
        let mut end = End::new(1, Code::Ok);
        end.trailers = Some(trailers.clone());
        a.end(end);
        assert_eq!(a.take().unwrap().unwrap().2, trailers);
    }

    #[test]
    fn an_error_or_a_missing_message_fails_the_call() {
        let mut a = UnaryAnswer::default();
        a.end(End::new(1, Code::NotFound));
        assert_eq!(a.take().unwrap().unwrap_err().code(), Code::NotFound);
        let mut a = UnaryAnswer::default();
        a.end(End::new(1, Code::Ok));
        assert_eq!(a.take().unwrap().unwrap_err().code(), Code::Internal);
        let mut a = UnaryAnswer::default();
        a.fail(&Status::unavailable("gone"));
        a.fail(&Status::cancelled("later"));
        assert_eq!(a.take().unwrap().unwrap_err().code(), Code::Unavailable);
    }
}
