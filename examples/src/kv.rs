//! The in-memory cache service of the `kv` examples and the demo.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tram::rpc::{Request, Response, Status, Streaming};

use crate::proto::kv::{self, command::Op, kv_server};

/// The kv service on a tram server that also answers gRPC, gRPC-Web and
/// Connect (JSON too, so curl works) on its port, to browsers of any
/// origin.
pub fn server() -> tram::Server {
    let server = tram::Server::builder()
        .add_service(kv_server::KvServer::new(KvStore::default()))
        .build();
    let config = tram_grpc::GatewayConfig {
        cors_allow_origin: Some("*".into()),
        ..tram_grpc::GatewayConfig::default()
    }
    .with_descriptors(&[DESCRIPTORS]);
    tram_grpc::with_gateway_config(server, config)
}

/// The compiled descriptors of the examples' protos (kv among them).
pub const DESCRIPTORS: &[u8] = tram::include_file_descriptor_set!();

/// Shards of the map, so that writers rarely meet.
const SHARDS: usize = 16;

/// The cache: a sharded map and a feed of changes for watchers.
#[derive(Clone)]
pub struct KvStore {
    shards: Arc<[RwLock<HashMap<String, Bytes>>; SHARDS]>,
    changes: broadcast::Sender<kv::Event>,
}

impl Default for KvStore {
    fn default() -> Self {
        KvStore {
            shards: Arc::new(std::array::from_fn(|_| RwLock::new(HashMap::new()))),
            changes: broadcast::channel(1024).0,
        }
    }
}

impl KvStore {
    fn shard(&self, key: &str) -> &RwLock<HashMap<String, Bytes>> {
        // FNV-1a: cheap and good enough to spread keys.
        let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        &self.shards[(h % SHARDS as u64) as usize]
    }

    fn get(&self, key: &str) -> Option<Bytes> {
        self.shard(key).read().get(key).cloned()
    }

    fn set(&self, key: String, value: Bytes) {
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(kv::Event {
                key: key.clone(),
                value: value.clone(),
                deleted: false,
            });
        }
        self.shard(&key).write().insert(key, value);
    }

    fn delete(&self, key: &str) -> bool {
        let deleted = self.shard(key).write().remove(key).is_some();
        if deleted && self.changes.receiver_count() > 0 {
            let _ = self.changes.send(kv::Event {
                key: key.to_owned(),
                value: Bytes::new(),
                deleted: true,
            });
        }
        deleted
    }

    fn run(&self, cmd: kv::Command) -> kv::CommandResult {
        let mut out = kv::CommandResult {
            id: cmd.id,
            ..Default::default()
        };
        match cmd.op {
            Some(Op::Get(g)) => {
                if let Some(v) = self.get(&g.key) {
                    out.found = true;
                    out.value = v;
                }
            }
            Some(Op::Set(s)) => {
                self.set(s.key, s.value);
                out.found = true;
            }
            Some(Op::Delete(d)) => out.found = self.delete(&d.key),
            None => {}
        }
        out
    }
}

fn check_key(key: &str) -> Result<(), Status> {
    if key.is_empty() {
        return Err(Status::invalid_argument("empty key"));
    }
    Ok(())
}

impl kv_server::Kv for KvStore {
    async fn get(
        &self,
        request: Request<kv::GetRequest>,
    ) -> Result<Response<kv::GetResponse>, Status> {
        let key = &request.get_ref().key;
        check_key(key)?;
        Ok(Response::new(match self.get(key) {
            Some(value) => kv::GetResponse { found: true, value },
            None => kv::GetResponse::default(),
        }))
    }

    async fn set(
        &self,
        request: Request<kv::SetRequest>,
    ) -> Result<Response<kv::SetResponse>, Status> {
        let req = request.into_inner();
        check_key(&req.key)?;
        self.set(req.key, req.value);
        Ok(Response::new(kv::SetResponse {}))
    }

    async fn delete(
        &self,
        request: Request<kv::DeleteRequest>,
    ) -> Result<Response<kv::DeleteResponse>, Status> {
        let key = &request.get_ref().key;
        check_key(key)?;
        Ok(Response::new(kv::DeleteResponse {
            deleted: self.delete(key),
        }))
    }

    type WatchStream = ReceiverStream<Result<kv::Event, Status>>;

    async fn watch(
        &self,
        request: Request<kv::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let prefix = request.into_inner().prefix;
        let mut changes = self.changes.subscribe();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let item = match changes.recv().await {
                    Ok(ev) if ev.key.starts_with(&prefix) => Ok(ev),
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(n)) => Err(Status::data_loss(format!(
                        "watcher fell behind by {n} events"
                    ))),
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let stop = item.is_err();
                // Ends when the client goes away (the stream is dropped).
                if tx.send(item).await.is_err() || stop {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn bulk_set(
        &self,
        request: Request<Streaming<kv::SetRequest>>,
    ) -> Result<Response<kv::BulkSetResponse>, Status> {
        let mut requests = request.into_inner();
        let mut count = 0;
        while let Some(req) = requests.message().await? {
            check_key(&req.key)?;
            self.set(req.key, req.value);
            count += 1;
        }
        Ok(Response::new(kv::BulkSetResponse { count }))
    }

    type SessionStream = ReceiverStream<Result<kv::CommandResult, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<kv::Command>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let mut commands = request.into_inner();
        let store = self.clone();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let item = match commands.message().await {
                    Ok(Some(cmd)) => Ok(store.run(cmd)),
                    Ok(None) => return,
                    Err(e) => Err(e),
                };
                if tx.send(item).await.is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
