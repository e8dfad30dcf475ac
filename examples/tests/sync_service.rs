//! A generated service whose unary method is a plain function
//! (`tram_build::Builder::sync_unary`), served and called over loopback TCP.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use tram::conn::{Listener, TcpConfig};
use tram::{Code, Request, Response, Server, Status};
use tram_examples::proto::echo_sync::{
    EchoMessage,
    echo_client::EchoClient,
    echo_server::{Echo, EchoServer},
};

/// Echoes, counting the calls; refuses id 0.
#[derive(Default)]
struct Counting {
    calls: AtomicU64,
}

impl Echo for Counting {
    fn say(&self, request: Request<EchoMessage>) -> Result<Response<EchoMessage>, Status> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if request.get_ref().id == 0 {
            return Err(Status::invalid_argument("id 0"));
        }
        Ok(Response::new(request.into_inner()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_unary_method_answers() {
    let listener = Listener::bind("127.0.0.1:0", TcpConfig::default())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let service = std::sync::Arc::new(Counting::default());
    let server = Server::builder()
        .add_service(EchoServer::from_arc(service.clone()))
        .build();
    tokio::spawn(server.serve_listener(listener, std::future::pending()));
    let client = EchoClient::connect_lazy(addr.to_string());
    for id in 1..=100 {
        let message = EchoMessage {
            id,
            payload: Bytes::from_static(b"hello"),
        };
        let answer = client.say(message.clone()).await.unwrap().into_inner();
        assert_eq!(answer, message);
    }
    let refused = client
        .say(EchoMessage {
            id: 0,
            payload: Bytes::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert_eq!(service.calls.load(Ordering::Relaxed), 101);
}
