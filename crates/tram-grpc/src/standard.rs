//! The standard gRPC services, as tram services (so they answer over tram
//! and, through the gateway, over gRPC): server reflection
//! (`grpc.reflection.v1` and `v1alpha`), built from the descriptor sets
//! `tram-build` writes, and health checking (`grpc.health.v1`, `Check` and
//! `Watch`).

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use parking_lot::Mutex;
use prost::Message;
use prost_types::{DescriptorProto, FileDescriptorProto, FileDescriptorSet};
use tokio::sync::{mpsc, watch};
use tram::rpc::{Draining, Request, Response, ServerBuilder, Status, Streaming};

/// Code generated from `proto/grpc/**` by `tram-build`.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod pb {
    /// `grpc.health.v1`.
    pub mod health {
        tram::include_proto!("grpc.health.v1");
    }
    /// `grpc.reflection.v1`.
    pub mod reflection_v1 {
        tram::include_proto!("grpc.reflection.v1");
    }
    /// `grpc.reflection.v1alpha`.
    pub mod reflection_v1alpha {
        tram::include_proto!("grpc.reflection.v1alpha");
    }
}

/// The descriptors of the standard services themselves.
const OWN_DESCRIPTORS: &[u8] = tram::include_file_descriptor_set!();

/// What reflection answers from: files by name, the files that define each
/// symbol, and the services.
#[derive(Debug, Default, Clone)]
struct Index {
    files: HashMap<String, (Bytes, Vec<String>)>,
    symbols: HashMap<String, String>,
    services: Vec<String>,
}

impl Index {
    fn add_set(&mut self, set: &[u8]) -> Result<(), prost::DecodeError> {
        for file in FileDescriptorSet::decode(set)?.file {
            self.add_file(file);
        }
        Ok(())
    }

    fn add_file(&mut self, file: FileDescriptorProto) {
        let name = file.name().to_owned();
        if self.files.contains_key(&name) {
            return;
        }
        let package = file.package();
        let qualify = |n: &str| {
            if package.is_empty() {
                n.to_owned()
            } else {
                format!("{package}.{n}")
            }
        };
        for s in &file.service {
            let full = qualify(s.name());
            for m in &s.method {
                self.symbols
                    .insert(format!("{full}.{}", m.name()), name.clone());
            }
            self.symbols.insert(full.clone(), name.clone());
            self.services.push(full);
        }
        fn messages(
            prefix: &str,
            ms: &[DescriptorProto],
            file: &str,
            out: &mut HashMap<String, String>,
        ) {
            for m in ms {
                let full = format!("{prefix}.{}", m.name());
                for e in &m.enum_type {
                    out.insert(format!("{full}.{}", e.name()), file.to_owned());
                }
                messages(&full, &m.nested_type, file, out);
                out.insert(full, file.to_owned());
            }
        }
        let prefix = package.to_owned();
        if prefix.is_empty() {
            for m in &file.message_type {
                self.symbols.insert(m.name().to_owned(), name.clone());
            }
        } else {
            messages(&prefix, &file.message_type, &name, &mut self.symbols);
        }
        for e in &file.enum_type {
            self.symbols.insert(qualify(e.name()), name.clone());
        }
        let deps = file.dependency.clone();
        self.files
            .insert(name, (Bytes::from(file.encode_to_vec()), deps));
    }

    /// `name` and every file it imports, transitively (each once).
    fn with_dependencies(&self, name: &str) -> Option<Vec<Bytes>> {
        self.files.get(name)?;
        let (mut out, mut seen, mut todo) = (Vec::new(), HashSet::new(), vec![name.to_owned()]);
        while let Some(n) = todo.pop() {
            if !seen.insert(n.clone()) {
                continue;
            }
            if let Some((bytes, deps)) = self.files.get(&n) {
                out.push(bytes.clone());
                todo.extend(deps.iter().cloned());
            }
        }
        Some(out)
    }
}

/// Server reflection over the given descriptor sets (what
/// `tram::include_file_descriptor_set!()` gives), plus the standard
/// services' own.
#[derive(Debug, Clone)]
pub struct Reflection {
    index: Arc<Index>,
}

impl Reflection {
    /// Reflection answering from `sets` (encoded `FileDescriptorSet`s).
    ///
    /// # Errors
    ///
    /// A set that does not decode.
    pub fn new(sets: &[&[u8]]) -> Result<Reflection, prost::DecodeError> {
        let mut index = Index::default();
        for set in sets.iter().copied().chain([OWN_DESCRIPTORS]) {
            index.add_set(set)?;
        }
        index.services.sort();
        index.services.dedup();
        Ok(Reflection {
            index: Arc::new(index),
        })
    }

    /// Lists only the services for which `served` says a method path
    /// (`/package.Service/Method`) is served; their descriptors stay
    /// available (other services' files may import them).
    fn only_served(mut self, served: impl Fn(&str) -> bool) -> Reflection {
        let mut index = (*self.index).clone();
        index.services.retain(|s| served(&format!("/{s}/")));
        self.index = Arc::new(index);
        self
    }

    /// The services reflection lists.
    pub fn services(&self) -> &[String] {
        &self.index.services
    }
}

/// The response stream of a reflection call.
pub struct Replies<T>(mpsc::Receiver<Result<T, Status>>);

impl<T> futures_core::Stream for Replies<T> {
    type Item = Result<T, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// Implements one version of the reflection service (v1 and v1alpha have
/// the same messages under different packages).
macro_rules! reflection_version {
    ($m:ident) => {
        impl pb::$m::server_reflection_server::ServerReflection for Reflection {
            type ServerReflectionInfoStream = Replies<pb::$m::ServerReflectionResponse>;

            async fn server_reflection_info(
                &self,
                request: Request<Streaming<pb::$m::ServerReflectionRequest>>,
            ) -> Result<Response<Self::ServerReflectionInfoStream>, Status> {
                use pb::$m::server_reflection_request::MessageRequest as Q;
                use pb::$m::server_reflection_response::MessageResponse as A;
                use pb::$m::*;
                let mut requests = request.into_inner();
                let index = self.index.clone();
                let (tx, rx) = mpsc::channel(4);
                tokio::spawn(async move {
                    while let Ok(Some(req)) = requests.message().await {
                        let not_found = |what: String| {
                            A::ErrorResponse(ErrorResponse {
                                error_code: tram::rpc::Code::NotFound as i32,
                                error_message: what,
                            })
                        };
                        let files = |name: Option<&String>| match name
                            .and_then(|n| index.with_dependencies(n))
                        {
                            Some(f) => A::FileDescriptorResponse(FileDescriptorResponse {
                                file_descriptor_proto: f,
                            }),
                            None => not_found(format!("{name:?} not found")),
                        };
                        let answer = match &req.message_request {
                            Some(Q::ListServices(_)) => {
                                A::ListServicesResponse(ListServiceResponse {
                                    service: index
                                        .services
                                        .iter()
                                        .map(|s| ServiceResponse { name: s.clone() })
                                        .collect(),
                                })
                            }
                            Some(Q::FileByFilename(f)) => files(Some(f)),
                            Some(Q::FileContainingSymbol(s)) => {
                                let s = s.trim_start_matches('.');
                                match index.symbols.get(s) {
                                    Some(f) => files(Some(f)),
                                    None => not_found(format!("symbol {s} not found")),
                                }
                            }
                            Some(Q::FileContainingExtension(e)) => not_found(format!(
                                "no extension {} of {}",
                                e.extension_number, e.containing_type
                            )),
                            Some(Q::AllExtensionNumbersOfType(t)) => {
                                A::AllExtensionNumbersResponse(ExtensionNumberResponse {
                                    base_type_name: t.clone(),
                                    extension_number: Vec::new(),
                                })
                            }
                            None => A::ErrorResponse(ErrorResponse {
                                error_code: tram::rpc::Code::InvalidArgument as i32,
                                error_message: "empty request".into(),
                            }),
                        };
                        let reply = ServerReflectionResponse {
                            valid_host: req.host.clone(),
                            original_request: Some(req),
                            message_response: Some(answer),
                        };
                        if tx.send(Ok(reply)).await.is_err() {
                            return;
                        }
                    }
                });
                Ok(Response::new(Replies(rx)))
            }
        }
    };
}

reflection_version!(reflection_v1);
reflection_version!(reflection_v1alpha);

use pb::health::health_check_response::ServingStatus;

/// Sets what the health service reports: per service name, and for the
/// server as a whole (the empty name, `SERVING` from the start). Once the
/// server begins a graceful shutdown, every service reports `NOT_SERVING`,
/// so that load balancers stop sending calls while it drains.
#[derive(Debug, Clone)]
pub struct HealthReporter {
    statuses: Arc<Mutex<HashMap<String, ServingStatus>>>,
    changed: watch::Sender<u64>,
    /// Once the server drains, every service reports `NOT_SERVING`.
    draining: Draining,
}

impl HealthReporter {
    fn new(draining: Draining) -> HealthReporter {
        let mut statuses = HashMap::new();
        statuses.insert(String::new(), ServingStatus::Serving);
        HealthReporter {
            statuses: Arc::new(Mutex::new(statuses)),
            changed: watch::channel(0).0,
            draining,
        }
    }

    /// Reports `service` as serving.
    pub fn set_serving(&self, service: &str) {
        self.set(service, ServingStatus::Serving);
    }

    /// Reports `service` as not serving (say, while draining).
    pub fn set_not_serving(&self, service: &str) {
        self.set(service, ServingStatus::NotServing);
    }

    fn set(&self, service: &str, status: ServingStatus) {
        self.statuses.lock().insert(service.to_owned(), status);
        self.changed.send_modify(|n| *n += 1);
    }

    fn get(&self, service: &str) -> Option<ServingStatus> {
        let status = self.statuses.lock().get(service).copied()?;
        Some(if self.draining.is_draining() {
            ServingStatus::NotServing
        } else {
            status
        })
    }
}

/// The health service.
#[derive(Debug, Clone)]
pub struct Health {
    reporter: HealthReporter,
}

impl pb::health::health_server::Health for Health {
    async fn check(
        &self,
        request: Request<pb::health::HealthCheckRequest>,
    ) -> Result<Response<pb::health::HealthCheckResponse>, Status> {
        let service = &request.get_ref().service;
        let status = self
            .reporter
            .get(service)
            .ok_or_else(|| Status::not_found(format!("unknown service {service}")))?;
        Ok(Response::new(pb::health::HealthCheckResponse {
            status: status as i32,
        }))
    }

    type WatchStream = Replies<pb::health::HealthCheckResponse>;

    async fn watch(
        &self,
        request: Request<pb::health::HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let service = request.into_inner().service;
        let reporter = self.reporter.clone();
        let mut changed = reporter.changed.subscribe();
        let mut draining = reporter.draining.clone();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut last = None;
            let mut drained = draining.is_draining();
            loop {
                let now = reporter
                    .get(&service)
                    .unwrap_or(ServingStatus::ServiceUnknown);
                if last != Some(now) {
                    last = Some(now);
                    let msg = pb::health::HealthCheckResponse { status: now as i32 };
                    if tx.send(Ok(msg)).await.is_err() {
                        return;
                    }
                }
                tokio::select! {
                    r = changed.changed() => if r.is_err() { return },
                    () = draining.wait(), if !drained => drained = true,
                    () = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Replies(rx)))
    }
}

/// Adds reflection (v1 and v1alpha, over `descriptor_sets` and the standard
/// services' own) and health checking to `builder`; returns the handle
/// that sets health. Add your services to `builder` first: reflection
/// lists the services `builder` serves (with the standard ones), and health
/// reports each as serving.
///
/// # Errors
///
/// A descriptor set that does not decode.
pub fn add_standard_services(
    builder: ServerBuilder,
    descriptor_sets: &[&[u8]],
) -> Result<(ServerBuilder, HealthReporter), prost::DecodeError> {
    let served: Vec<String> = builder.method_paths().map(str::to_owned).collect();
    let own = ["/grpc.health.v1.Health/", "/grpc.reflection."];
    let reflection = Reflection::new(descriptor_sets)?.only_served(|prefix| {
        own.iter().any(|o| prefix.starts_with(o)) || served.iter().any(|p| p.starts_with(prefix))
    });
    let reporter = HealthReporter::new(builder.draining());
    for s in reflection.services() {
        reporter.set_serving(s);
    }
    let builder = builder
        .add_service(
            pb::reflection_v1::server_reflection_server::ServerReflectionServer::new(
                reflection.clone(),
            ),
        )
        .add_service(
            pb::reflection_v1alpha::server_reflection_server::ServerReflectionServer::new(
                reflection,
            ),
        )
        .add_service(pb::health::health_server::HealthServer::new(Health {
            reporter: reporter.clone(),
        }));
    Ok((builder, reporter))
}
