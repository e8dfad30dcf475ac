//! The server's side of one connection's calls, as pure code: it takes the
//! client's frames (after the handshake) and says what to do — start a
//! handler, send a frame, drop a handler — through [`Effects`], without
//! touching a socket, a clock or a task itself. The connection's driver
//! carries the effects out; tests record them.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::time::Instant;
use tram_wire::{Call, CallId, Code, Frame, GoAway, MessageRun, Metadata, Reason, Settings};

use super::super::intercept::{CallInfo, ServerInterceptor};
use super::super::protocol::{self, ProtocolError};
use super::super::stream::CallShared;
use super::super::{IdMap, Status};
use super::Routes;
use super::handler::{MethodKind, Route};

/// What the call table asks of the connection, as frames are handled.
pub(crate) trait Effects {
    /// Starts `route`'s handler for a call just accepted: the key of its
    /// future, or `None` if it finished at once (its answer is queued).
    fn start(&mut self, route: &Route, call: Accepted) -> Option<usize>;
    /// Sends a frame.
    fn send(&mut self, frame: Frame);
    /// Drops the handler future with this key (its call is cancelled).
    fn cancel(&mut self, task: usize);
    /// A call ended with `code` before any handler ran (`route`: `None`
    /// for a method the server does not have), for the observers.
    fn rejected(&mut self, route: Option<&Route>, metadata: Option<&Metadata>, code: Code) {
        let _ = (route, metadata, code);
    }
    /// The time a call's deadline counts from: when its CALL was read.
    fn now(&mut self) -> Instant {
        Instant::now()
    }
}

/// A call accepted, for its handler.
pub(crate) struct Accepted {
    pub(crate) call: CallId,
    pub(crate) message: Option<Bytes>,
    pub(crate) metadata: Metadata,
    pub(crate) deadline: Option<Instant>,
    pub(crate) shared: Option<Arc<CallShared>>,
}

/// One call the connection knows about.
struct Entry {
    /// Its handler future's key in the driver's executor, while it runs.
    task: Option<usize>,
    shared: Option<Arc<CallShared>>,
    /// The client may still send on it.
    client_open: bool,
    /// We have sent (or the handler is about to send) the final frame.
    server_done: bool,
    /// The handler runs as its own task (`spawn_handlers`): it writes the
    /// final frame before this connection sees it finish.
    spawned: bool,
}

/// Who the client is, for interceptors.
pub(crate) struct Peer {
    pub(crate) addr: SocketAddr,
    pub(crate) certificates: Option<Vec<Bytes>>,
}

/// The calls of one connection, and the methods the client bound.
pub(crate) struct ServerCalls {
    routes: Arc<Routes>,
    /// Our limits, as announced.
    settings: Settings,
    /// The client's, once its SETTINGS arrived.
    pub(crate) peer_settings: Option<Settings>,
    /// Method numbers bound by the client, to our routes (`None`: unknown):
    /// a call finds its handler by number, without hashing its path.
    methods: IdMap<Option<Arc<Route>>>,
    calls: IdMap<Entry>,
    /// CALL frames accepted so far.
    call_seq: u64,
    going_away: bool,
    /// A first GOAWAY said the connection is closing, without a count:
    /// calls the client sent before it saw it are still taken.
    announced: bool,
    spawn_handlers: bool,
    interceptor: Option<ServerInterceptor>,
    peer: Peer,
}

impl ServerCalls {
    pub(crate) fn new(
        routes: Arc<Routes>,
        settings: Settings,
        spawn_handlers: bool,
        interceptor: Option<ServerInterceptor>,
        peer: Peer,
    ) -> ServerCalls {
        ServerCalls {
            routes,
            settings,
            peer_settings: None,
            methods: IdMap::default(),
            calls: IdMap::default(),
            call_seq: 0,
            going_away: false,
            announced: false,
            spawn_handlers,
            interceptor,
            peer,
        }
    }

    /// No call is open.
    pub(crate) fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// Calls open.
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }

    /// CALL frames accepted so far.
    pub(crate) fn started(&self) -> u64 {
        self.call_seq
    }

    /// GOAWAY was sent or received: no new calls.
    pub(crate) fn is_going_away(&self) -> bool {
        self.going_away
    }

    /// Whether a first GOAWAY went out (or the final one).
    pub(crate) fn is_announced(&self) -> bool {
        self.announced || self.going_away
    }

    /// The first GOAWAY of a graceful close: the client is to send no new
    /// calls, but those it sent before it saw this are still taken (the
    /// count is the largest there is). The final GOAWAY, with the count,
    /// follows once the client has answered a PING sent after this one:
    /// every call it sent before then has arrived. `None` if one went
    /// already.
    pub(crate) fn announce(&mut self, message: &str) -> Option<Frame> {
        if self.is_announced() {
            return None;
        }
        self.announced = true;
        Some(Frame::GoAway(GoAway {
            last_call_seq: u64::MAX,
            reason: Reason::NO_ERROR,
            message: message.to_owned(),
        }))
    }

    /// Stops taking calls; the GOAWAY to send, unless one went already
    /// (an error is always reported).
    pub(crate) fn go_away(&mut self, reason: Reason, message: &str) -> Option<Frame> {
        let send = !self.going_away || reason != Reason::NO_ERROR;
        self.going_away = true;
        send.then(|| {
            Frame::GoAway(GoAway {
                last_call_seq: self.call_seq,
                reason,
                message: message.to_owned(),
            })
        })
    }

    /// The GOAWAY for a protocol error of the client's.
    pub(crate) fn fail(&mut self, error: &ProtocolError) -> Option<Frame> {
        self.go_away(error.reason, &error.message)
    }

    /// The connection is closing: every stream's consumer is told.
    pub(crate) fn close_all(&mut self) {
        for (_, entry) in self.calls.drain() {
            if let Some(s) = entry.shared {
                s.abort(Status::unavailable("connection closing"));
            }
        }
    }

    /// The handler of `call` finished (its answer is queued).
    pub(crate) fn finished(&mut self, call: CallId) {
        if let Some(e) = self.calls.get_mut(&call) {
            e.task = None;
            e.server_done = true;
            if !e.client_open {
                self.calls.remove(&call);
            }
        }
    }

    /// Plain messages of one call, queued on its request stream whole.
    pub(crate) fn run(&self, run: MessageRun) -> Result<(), ProtocolError> {
        match self.open_for_messages(run.call())? {
            Some(shared) => protocol::push_run(shared, run),
            None => Ok(()),
        }
    }

    /// One frame from the client, after the handshake.
    pub(crate) fn frame(
        &mut self,
        frame: Frame,
        fx: &mut impl Effects,
    ) -> Result<(), ProtocolError> {
        match frame {
            Frame::Bind(b) => {
                if self.methods.contains_key(&b.method) {
                    return Err(ProtocolError::new(format!(
                        "method {} bound twice",
                        b.method
                    )));
                }
                if self.methods.len() >= self.settings.max_bound_methods as usize {
                    return Err(ProtocolError::with_reason(
                        Reason::LIMIT_EXCEEDED,
                        "too many bound methods",
                    ));
                }
                let known = self.routes.0.get(&b.name).cloned();
                self.methods.insert(b.method, known);
                Ok(())
            }
            Frame::Call(c) => self.call(c, fx),
            Frame::Message(m) => {
                let Some(shared) = self.open_for_messages(m.call)? else {
                    return Ok(());
                };
                if m.metadata.is_some() {
                    return Err(ProtocolError::new(format!(
                        "MESSAGE with leading metadata from the client on call {}",
                        m.call
                    )));
                }
                if shared.push(m.payload).is_err() {
                    return Err(protocol::no_credit(m.call));
                }
                if m.end_stream {
                    self.client_closed(m.call);
                }
                Ok(())
            }
            Frame::End(e) => {
                if e.code != Code::Ok
                    || e.message.is_some()
                    || e.details.is_some()
                    || e.trailers.is_some()
                {
                    return Err(ProtocolError::new(
                        "client END must be a bare OK half-close",
                    ));
                }
                match self.calls.get(&e.call) {
                    Some(entry) if entry.client_open => {
                        self.client_closed(e.call);
                        Ok(())
                    }
                    None if self.going_away => Ok(()),
                    _ => Err(ProtocolError::new(format!(
                        "END on call {} not open",
                        e.call
                    ))),
                }
            }
            Frame::Cancel(c) => {
                // Unknown: it crossed the call's end on the wire; ignore.
                if let Some(entry) = self.calls.remove(&c.call) {
                    if let Some(task) = entry.task {
                        fx.cancel(task);
                    }
                    if let Some(s) = &entry.shared {
                        s.abort(Status::cancelled("cancelled by the client"));
                    }
                    if !entry.server_done {
                        let end = Status::new(c.code, "cancelled by the client").to_wire(c.call);
                        fx.send(Frame::End(end));
                    }
                }
                Ok(())
            }
            Frame::Credit(c) => match self.calls.get(&c.call).and_then(|e| e.shared.as_ref()) {
                Some(shared) => protocol::add_credit(shared, c.call, c.n),
                None => Ok(()),
            },
            Frame::GoAway(_) => {
                // The client is leaving: finish what is in flight, then close.
                self.going_away = true;
                Ok(())
            }
            Frame::Settings(_) | Frame::Ping(_) => {
                unreachable!("handled by protocol::control before the call table")
            }
        }
    }

    /// The request stream MESSAGE frames of `call` go to: `None` if they
    /// are to be dropped (the call is unknown while going away).
    fn open_for_messages(&self, call: CallId) -> Result<Option<&CallShared>, ProtocolError> {
        let Some(entry) = self.calls.get(&call) else {
            if self.going_away {
                return Ok(None);
            }
            return Err(ProtocolError::new(format!(
                "MESSAGE on unknown call {call}"
            )));
        };
        if !entry.client_open {
            return Err(ProtocolError::new(format!(
                "MESSAGE after the client closed call {call}"
            )));
        }
        match &entry.shared {
            Some(s) => Ok(Some(s)),
            None => Err(protocol::no_credit(call)),
        }
    }

    fn client_closed(&mut self, call: CallId) {
        if let Some(entry) = self.calls.get_mut(&call) {
            entry.client_open = false;
            if let Some(s) = &entry.shared {
                s.close_inbox(Ok(()));
            }
            if entry.server_done {
                self.calls.remove(&call);
            }
        }
    }

    fn call(&mut self, c: Call, fx: &mut impl Effects) -> Result<(), ProtocolError> {
        if let Some(old) = self.calls.get(&c.call) {
            // A client reuses an id only after our final frame for it. A
            // spawned handler writes that frame from its own task, so its
            // call can look alive here a moment longer: then the handler
            // has answered, and its task is only finishing.
            if !old.spawned || old.client_open {
                return Err(ProtocolError::new(format!("duplicate call id {}", c.call)));
            }
            if let Some(task) = old.task {
                fx.cancel(task);
            }
            self.calls.remove(&c.call);
        }
        let Some(bound) = self.methods.get(&c.method) else {
            return Err(ProtocolError::new(format!(
                "CALL on unbound method {}",
                c.method
            )));
        };
        if self.going_away {
            // Not accepted: the client learns so from GOAWAY's count.
            return Ok(());
        }
        self.call_seq += 1;
        let mut entry = Entry {
            task: None,
            shared: None,
            client_open: !c.end_stream,
            server_done: false,
            spawned: false,
        };
        let Some(route) = bound.as_deref() else {
            fx.rejected(None, c.metadata.as_ref(), Code::Unimplemented);
            return self.reject(c.call, entry, Status::unimplemented("unknown method"), fx);
        };
        if let Some(status) = self.refusal(&c, route) {
            fx.rejected(Some(route), c.metadata.as_ref(), status.code());
            return self.reject(c.call, entry, status, fx);
        }
        let deadline = c.timeout().map(|t| fx.now() + t);
        let mut message = c.message;
        if route.kind != MethodKind::Unary {
            let peer = self.peer_settings.unwrap_or_default();
            let shared = CallShared::new(self.settings.initial_credit, peer.initial_credit);
            if route.kind.streams_requests() {
                // The CALL's message is the stream's first (and uses credit).
                if let Some(first) = message.take() {
                    if shared.push(first).is_err() {
                        return Err(ProtocolError::new("CALL message without credit"));
                    }
                }
                if c.end_stream {
                    shared.close_inbox(Ok(()));
                }
            }
            entry.shared = Some(shared);
        }
        let accepted = Accepted {
            call: c.call,
            message,
            metadata: c.metadata.unwrap_or_default(),
            deadline,
            shared: entry.shared.clone(),
        };
        entry.spawned = self.spawn_handlers;
        entry.task = fx.start(route, accepted);
        entry.server_done = entry.task.is_none();
        // Most unary calls are answered at once and never enter the table.
        if entry.task.is_some() || entry.client_open {
            self.calls.insert(c.call, entry);
        }
        Ok(())
    }

    /// Why a call to `route` is refused before its handler runs, if it is.
    fn refusal(&self, c: &Call, route: &Route) -> Option<Status> {
        if self.calls.len() >= self.settings.max_concurrent_calls as usize {
            return Some(Status::resource_exhausted("too many concurrent calls"));
        }
        if let Some(check) = &self.interceptor {
            let empty = Metadata::new();
            let info = CallInfo {
                method: &route.name,
                metadata: c.metadata.as_ref().unwrap_or(&empty),
                peer: self.peer.addr,
                peer_certificates: self.peer.certificates.as_deref(),
            };
            if let Err(status) = check.check(&info) {
                return Some(status);
            }
        }
        if c.metadata
            .as_ref()
            .is_some_and(|m| m.encoded_len() > self.settings.max_metadata_size as usize)
        {
            return Some(Status::resource_exhausted("request metadata too large"));
        }
        if !route.kind.streams_requests() && (!c.end_stream || c.message.is_none()) {
            return Some(Status::internal(
                "a single-request method needs exactly one message",
            ));
        }
        None
    }

    /// Ends a call before its handler runs.
    fn reject(
        &mut self,
        call: CallId,
        mut entry: Entry,
        status: Status,
        fx: &mut impl Effects,
    ) -> Result<(), ProtocolError> {
        fx.send(Frame::End(status.to_wire(call)));
        entry.server_done = true;
        if entry.client_open {
            // Further MESSAGE frames are discarded until the client
            // closes (PROTOCOL.md §6.1).
            let shared = CallShared::new(tram_wire::MAX_CREDIT, 0);
            shared.close_inbox(Err(Status::cancelled("call rejected")));
            entry.shared = Some(shared);
            self.calls.insert(call, entry);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
