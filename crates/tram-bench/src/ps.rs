//! protosocket-rpc's side of the benchmarks: its RPC layer needs a request
//! id and a control code inside every message, so requests and responses
//! are one prost message type. Configured as protosocket's own example
//! server and client are (see the `compare` module docs).

use bytes::Bytes;

/// A request with this `id` opens a server stream of copies of itself;
/// any other is echoed once.
pub(crate) const STREAM: u64 = u64::MAX;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Msg {
    #[prost(uint64, tag = "1")]
    pub(crate) request_id: u64,
    #[prost(uint32, tag = "2")]
    pub(crate) code: u32,
    #[prost(uint64, tag = "3")]
    pub(crate) id: u64,
    #[prost(bytes = "bytes", tag = "4")]
    pub(crate) payload: Bytes,
}

impl protosocket_rpc::Message for Msg {
    fn message_id(&self) -> u64 {
        self.request_id
    }
    fn control_code(&self) -> protosocket_rpc::ProtosocketControlCode {
        protosocket_rpc::ProtosocketControlCode::from_u8(self.code as u8)
    }
    fn set_message_id(&mut self, message_id: u64) {
        self.request_id = message_id;
    }
    fn cancelled(message_id: u64) -> Self {
        Msg {
            request_id: message_id,
            code: protosocket_rpc::ProtosocketControlCode::Cancel as u32,
            ..Msg::default()
        }
    }
    fn ended(message_id: u64) -> Self {
        Msg {
            request_id: message_id,
            code: protosocket_rpc::ProtosocketControlCode::End as u32,
            ..Msg::default()
        }
    }
}

/// The same codec both ways: requests and responses are one type.
pub(crate) type ClientCodec = (
    protosocket::PooledEncoder<protosocket_prost::ProstSerializer<Msg>>,
    protosocket_prost::ProstDecoder<Msg>,
);

/// Hands each connection an echo service.
pub(crate) struct Service;

impl protosocket_rpc::server::SocketService for Service {
    type ConnectionService = Conn;
    type SocketListener = protosocket::TcpSocketListener;

    fn codec(&mut self) -> ClientCodec {
        ClientCodec::default()
    }

    fn new_stream_service(
        &mut self,
        _stream: &<protosocket::TcpSocketListener as protosocket::SocketListener>::Stream,
    ) -> Conn {
        Conn
    }
}

/// Echoes every unary call; streams copies of a `STREAM` request.
pub(crate) struct Conn;

impl protosocket_rpc::server::ConnectionService for Conn {
    type Codec = ClientCodec;
    type Request = Msg;
    type Response = Msg;
    type UnaryFutureType = std::future::Ready<Msg>;
    type StreamType = futures::stream::Repeat<Msg>;

    fn new_rpc(
        &mut self,
        m: Msg,
    ) -> protosocket_rpc::server::RpcKind<Self::UnaryFutureType, Self::StreamType> {
        let reply = Msg { code: 0, ..m };
        if reply.id == STREAM {
            // Copies of the request, for as long as the client reads them.
            protosocket_rpc::server::RpcKind::Streaming(futures::stream::repeat(reply))
        } else {
            protosocket_rpc::server::RpcKind::Unary(std::future::ready(reply))
        }
    }
}
