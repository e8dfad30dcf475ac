//! protosocket-rpc 2.0.2: its RPC layer needs a request id and a control
//! code inside every message, so requests and responses are one prost
//! message type. Configured as protosocket's own example server and client
//! are: `SocketRpcServer` over `TcpSocketListener`, a
//! `PooledEncoder<ProstSerializer>` + `ProstDecoder` codec, 4 MiB max
//! buffer, 1 MiB allocation increment, 512 queued outbound messages; the
//! client's connection future spawned on the runtime, `send_unary` per
//! call.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use bytes::Bytes;
use tokio::net::TcpListener;

use super::echo::EchoMessage;
use crate::runner::flow::Counter;

/// A request with this `id` opens a server stream of copies of itself;
/// any other is echoed once.
const STREAM: u64 = u64::MAX;

#[derive(Clone, PartialEq, prost::Message)]
struct Msg {
    #[prost(uint64, tag = "1")]
    request_id: u64,
    #[prost(uint32, tag = "2")]
    code: u32,
    #[prost(uint64, tag = "3")]
    id: u64,
    #[prost(bytes = "bytes", tag = "4")]
    payload: Bytes,
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
type ClientCodec = (
    protosocket::PooledEncoder<protosocket_prost::ProstSerializer<Msg>>,
    protosocket_prost::ProstDecoder<Msg>,
);

/// Hands each connection an echo service.
struct Service;

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
struct Conn;

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

/// Serves the echo service (and its stream) until aborted.
pub(super) async fn serve(listener: TcpListener) -> anyhow::Result<()> {
    // protosocket binds its own listener: hand the port over.
    let addr = listener.local_addr()?;
    drop(listener);
    let listener = protosocket::TcpSocketListener::listen(addr, 1024, None)?;
    let mut server =
        protosocket_rpc::server::SocketRpcServer::new(listener, Service, 4 << 20, 1 << 20, 128)?;
    // As protosocket's own example server sets it.
    server.set_max_queued_outbound_messages(512);
    server.await?;
    Ok(())
}

/// A client over one connection, its driver task aborted with the last
/// clone.
#[derive(Clone)]
pub(crate) struct Client {
    rpc: protosocket_rpc::client::RpcClient<Msg, Msg>,
    _driver: Arc<Driver>,
}

struct Driver(tokio::task::JoinHandle<()>);

impl Drop for Driver {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Client {
    pub(super) async fn connect(addr: SocketAddr) -> anyhow::Result<Client> {
        let config = protosocket_rpc::client::Configuration::new(
            protosocket_rpc::client::TcpStreamConnector,
        );
        let (rpc, connection) =
            protosocket_rpc::client::connect::<ClientCodec, _>(addr, &config).await?;
        Ok(Client {
            rpc,
            _driver: Arc::new(Driver(tokio::spawn(connection))),
        })
    }

    /// One echo call: the id the answer carries.
    pub(super) async fn call(&self, m: EchoMessage) -> anyhow::Result<u64> {
        // protosocket-rpc 2.0.2 takes the message id from the caller: it
        // must be unique per call in flight (the benchmarks' ids are).
        let completion = self.rpc.send_unary(Msg {
            request_id: m.id,
            code: 0,
            id: m.id,
            payload: m.payload,
        })?;
        Ok(completion.await?.id)
    }
}

/// Reads one server stream of `size`-byte messages, counting them into
/// `received`.
pub(crate) async fn protosocket_stream_client(
    addr: SocketAddr,
    size: usize,
    received: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    use futures::StreamExt;
    let client = Client::connect(addr).await?;
    let mut stream = client.rpc.send_streaming(Msg {
        request_id: 1,
        code: 0,
        id: STREAM,
        payload: Bytes::from(vec![0xab; size]),
    })?;
    let mut count = Counter::new(&received);
    while let Some(m) = stream.next().await {
        m?;
        count.one();
    }
    Ok(())
}
