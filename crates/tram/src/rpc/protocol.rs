//! What both ends of an RPC connection do alike: the protocol error that
//! closes a connection (with its GOAWAY), the frames every connection
//! handles the same way (SETTINGS first and once, PING), and how a call's
//! stream state takes credit and runs of messages.

use tram_wire::{CallId, Frame, GoAway, MessageRun, Reason, Settings};

use super::codec::RpcEncoder;
use super::stream::CallShared;
use crate::conn::{Locked, Sender};

/// Why a connection is closed: the peer broke the protocol, exceeded a
/// limit or missed a deadline. It becomes a GOAWAY with `reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProtocolError {
    pub(crate) reason: Reason,
    pub(crate) message: String,
}

impl ProtocolError {
    /// A `PROTOCOL_ERROR`.
    pub(crate) fn new(message: impl Into<String>) -> ProtocolError {
        ProtocolError::with_reason(Reason::PROTOCOL_ERROR, message)
    }

    pub(crate) fn with_reason(reason: Reason, message: impl Into<String>) -> ProtocolError {
        ProtocolError {
            reason,
            message: message.into(),
        }
    }

    /// Queues the GOAWAY that tells the peer why, naming the last call
    /// this side accepted.
    pub(crate) fn go_away(&self, out: &Sender<RpcEncoder>, last_call_seq: u64) {
        send_go_away(out, last_call_seq, self.reason, &self.message);
    }
}

/// Queues a GOAWAY (best effort: a closed connection needs none).
pub(crate) fn send_go_away(
    out: &Sender<RpcEncoder>,
    last_call_seq: u64,
    reason: Reason,
    message: &str,
) {
    let _ = out.force_send(Frame::GoAway(GoAway {
        last_call_seq,
        reason,
        message: message.to_owned(),
    }));
}

/// A frame after the handshake that is not for one side alone.
pub(crate) enum Control {
    /// The peer's SETTINGS arrived (the handshake is done); the encoder
    /// already keeps to its limits.
    Settled(Settings),
    /// Answered here (a PING).
    Handled,
    /// The peer answered our PING with this payload.
    Pong([u8; 8]),
    /// For the side's own handling.
    Other(Frame),
}

/// Where [`control`] keeps the peer's limits and sends its answers: the
/// outbound queue, or the queue already locked (the client's reader, which
/// holds it for the call table).
pub(crate) trait ControlOut {
    fn set_peer(&mut self, settings: Settings);
    /// Queues `frame`, best effort (a closed connection needs no answer).
    fn send(&mut self, frame: Frame);
}

impl ControlOut for &Sender<RpcEncoder> {
    fn set_peer(&mut self, settings: Settings) {
        self.with_encoder(|e| e.set_peer(settings));
    }
    fn send(&mut self, frame: Frame) {
        let _ = self.force_send(frame);
    }
}

impl ControlOut for &mut Locked<'_, RpcEncoder> {
    fn set_peer(&mut self, settings: Settings) {
        self.encoder_mut().set_peer(settings);
    }
    fn send(&mut self, frame: Frame) {
        let _ = self.force_send(frame);
    }
}

/// Applies the rules every connection shares to `frame`: the peer's first
/// frame is SETTINGS and it comes once; a PING is answered.
pub(crate) fn control(
    settled: bool,
    frame: Frame,
    mut out: impl ControlOut,
) -> Result<Control, ProtocolError> {
    match frame {
        Frame::Settings(s) if !settled => {
            out.set_peer(s);
            Ok(Control::Settled(s))
        }
        _ if !settled => Err(not_settings()),
        Frame::Settings(_) => Err(ProtocolError::new("second SETTINGS")),
        Frame::Ping(p) => match p.reply() {
            Some(pong) => {
                out.send(Frame::Ping(pong));
                Ok(Control::Handled)
            }
            None => Ok(Control::Pong(p.payload)),
        },
        other => Ok(Control::Other(other)),
    }
}

/// Whether [`control`] has anything to do with `frame` once the handshake
/// is done (a cheap test that lets calls and messages skip it).
pub(crate) fn is_control(frame: &Frame) -> bool {
    matches!(frame, Frame::Settings(_) | Frame::Ping(_))
}

/// The error for anything before the peer's SETTINGS.
pub(crate) fn not_settings() -> ProtocolError {
    ProtocolError::new("first frame is not SETTINGS")
}

/// Queues a run of plain messages on its call's stream, within the credit
/// we granted.
pub(crate) fn push_run(shared: &CallShared, run: MessageRun) -> Result<(), ProtocolError> {
    let call = run.call();
    shared.push_run(run).map_err(|_| no_credit(call))
}

/// Adds CREDIT from the peer to its call's stream.
pub(crate) fn add_credit(shared: &CallShared, call: CallId, n: u32) -> Result<(), ProtocolError> {
    shared
        .add_credit(n)
        .map_err(|_| ProtocolError::new(format!("credit overflow on call {call}")))
}

/// The error for a message beyond the credit granted.
pub(crate) fn no_credit(call: CallId) -> ProtocolError {
    ProtocolError::new(format!("MESSAGE without credit on call {call}"))
}
