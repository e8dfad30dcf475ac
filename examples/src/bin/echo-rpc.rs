//! Unary RPC with a generated service: an echo server and a client in one
//! process.
//!
//! `cargo run -p tram-examples --bin echo-rpc`

use bytes::Bytes;
use tram::conn::{Listener, TcpConfig};
use tram::rpc::{Request, Response, Server, Status};
use tram_examples::proto::echo::{EchoMessage, echo_client::EchoClient, echo_server};

/// The service: answers with the request.
struct Echo;

impl echo_server::Echo for Echo {
    async fn say(&self, request: Request<EchoMessage>) -> Result<Response<EchoMessage>, Status> {
        Ok(Response::new(request.into_inner()))
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default()).await?;
    let addr = listener.local_addr()?;
    let server = Server::builder()
        .add_service(echo_server::EchoServer::new(Echo))
        .build();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));

    let client = EchoClient::connect_lazy(addr.to_string());
    for id in 0..3 {
        let reply = client
            .say(EchoMessage {
                id,
                payload: Bytes::from(format!("hello {id}")),
            })
            .await?;
        println!(
            "echoed: id={} payload={:?}",
            reply.get_ref().id,
            reply.get_ref().payload
        );
    }
    Ok(())
}
