//! Writes the tram server trait, server wrapper and client of a service.

use std::fmt::Write;

use prost_build::{Method, Service, ServiceGenerator};

pub(crate) struct TramGenerator {
    pub(crate) client: bool,
    pub(crate) server: bool,
    /// Unary methods (`package.Service.Method`) served without a future.
    pub(crate) sync_unary: Vec<String>,
}

impl ServiceGenerator for TramGenerator {
    fn generate(&mut self, service: Service, buf: &mut String) {
        if self.server {
            server(&service, &self.sync_unary, buf);
        }
        if self.client {
            client(&service, buf);
        }
    }
}

fn path(service: &Service, method: &Method) -> String {
    if service.package.is_empty() {
        format!("/{}/{}", service.proto_name, method.proto_name)
    } else {
        format!(
            "/{}.{}/{}",
            service.package, service.proto_name, method.proto_name
        )
    }
}

/// Message types are relative to the package module; the generated code
/// lives one module down.
fn ty(rust_path: &str) -> String {
    if rust_path.starts_with("::") || rust_path.starts_with("crate::") {
        rust_path.to_owned()
    } else {
        format!("super::{rust_path}")
    }
}

fn docs(comments: &prost_build::Comments, indent: &str, buf: &mut String) {
    for line in comments.leading.iter().flat_map(|c| c.lines()) {
        // protobuf keeps the space after `//`; write exactly one.
        let line = line.strip_prefix(' ').unwrap_or(line);
        let _ = writeln!(
            buf,
            "{indent}///{}{line}",
            if line.is_empty() { "" } else { " " }
        );
    }
}

fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The method as [`TramGenerator::sync_unary`] names it: its path
/// without the leading slash, dotted (`package.Service.Method`).
fn full_name(service: &Service, method: &Method) -> String {
    path(service, method)[1..].replace('/', ".")
}

fn stream_type(method: &Method) -> String {
    format!("{}Stream", method.proto_name)
}

fn server(service: &Service, sync_unary: &[String], buf: &mut String) {
    let sync = |m: &Method| sync_unary.contains(&full_name(service, m));
    let name = &service.name;
    let module = format!("{}_server", snake(name));
    let _ = writeln!(buf, "/// Server side of `{}`.", service.proto_name);
    let _ = writeln!(buf, "pub mod {module} {{");
    buf.push_str("    #![allow(unused_imports, clippy::all)]\n    use ::tram::codegen::*;\n\n");
    docs(&service.comments, "    ", buf);
    let _ = writeln!(buf, "    pub trait {name}: Send + Sync + 'static {{");
    for m in &service.methods {
        let input = ty(&m.input_type);
        let output = ty(&m.output_type);
        let req = if m.client_streaming {
            format!("Request<Streaming<{input}>>")
        } else {
            format!("Request<{input}>")
        };
        let resp = if m.server_streaming {
            let st = stream_type(m);
            let _ = writeln!(
                buf,
                "        /// The response stream of `{}`.\n        type {st}: Stream<Item = Result<{output}, Status>> + Send + 'static;",
                m.proto_name
            );
            format!("Self::{st}")
        } else {
            output
        };
        docs(&m.comments, "        ", buf);
        if sync(m) && (m.client_streaming || m.server_streaming) {
            let _ = writeln!(
                buf,
                "        compile_error!(\"tram-build: sync_unary names {}, which streams\");",
                full_name(service, m)
            );
        } else if sync(m) {
            let _ = writeln!(
                buf,
                "        fn {}(&self, request: {req}) -> Result<Response<{resp}>, Status>;",
                m.name
            );
        } else {
            let _ = writeln!(
                buf,
                "        fn {}(&self, request: {req}) -> impl Future<Output = Result<Response<{resp}>, Status>> + Send;",
                m.name
            );
        }
    }
    buf.push_str("    }\n\n");
    let _ = writeln!(
        buf,
        "    /// Serves a [`{name}`] implementation: pass it to `ServerBuilder::add_service`.
    pub struct {name}Server<T> {{
        inner: Arc<T>,
    }}

    impl<T: {name}> {name}Server<T> {{
        /// Wraps an implementation.
        pub fn new(inner: T) -> Self {{
            Self {{ inner: Arc::new(inner) }}
        }}

        /// Wraps an implementation already shared.
        pub fn from_arc(inner: Arc<T>) -> Self {{
            Self {{ inner }}
        }}
    }}

    impl<T: {name}> Service for {name}Server<T> {{
        fn register(self, builder: ServerBuilder) -> ServerBuilder {{"
    );
    for m in &service.methods {
        if sync(m) && !m.client_streaming && !m.server_streaming {
            let _ = writeln!(
                buf,
                "            let inner = self.inner.clone();
            let builder = builder.unary_sync(\"{}\", move |request| inner.{}(request));",
                path(service, m),
                m.name
            );
            continue;
        }
        let kind = match (m.client_streaming, m.server_streaming) {
            (false, false) => "unary",
            (false, true) => "server_streaming",
            (true, false) => "client_streaming",
            (true, true) => "bidi_streaming",
        };
        let _ = writeln!(
            buf,
            "            let inner = self.inner.clone();
            let builder = builder.{kind}(\"{}\", move |request| {{
                let inner = inner.clone();
                async move {{ inner.{}(request).await }}
            }});",
            path(service, m),
            m.name
        );
    }
    buf.push_str("            builder\n        }\n    }\n}\n\n");
}

fn client(service: &Service, buf: &mut String) {
    let name = &service.name;
    let module = format!("{}_client", snake(name));
    let _ = writeln!(buf, "/// Client side of `{}`.", service.proto_name);
    let _ = writeln!(buf, "pub mod {module} {{");
    buf.push_str("    #![allow(unused_imports, clippy::all)]\n    use ::tram::codegen::*;\n\n");
    docs(&service.comments, "    ", buf);
    let _ = writeln!(
        buf,
        "    #[derive(Debug, Clone)]
    pub struct {name}Client {{
        channel: Channel,
    }}

    impl {name}Client {{
        /// A client over `channel`.
        pub fn new(channel: Channel) -> Self {{
            Self {{ channel }}
        }}

        /// A client for `target` (`host:port`); connects on the first call.
        pub fn connect_lazy(target: impl Into<String>) -> Self {{
            Self::new(Channel::new(target))
        }}

        /// A client for `target` (`host:port`), connected now.
        ///
        /// # Errors
        ///
        /// `UNAVAILABLE` with the reason when the connection cannot be made.
        pub async fn connect(target: impl Into<String>) -> Result<Self, Status> {{
            Ok(Self::new(Channel::connect(target).await?))
        }}

        /// The underlying channel.
        pub fn channel(&self) -> &Channel {{
            &self.channel
        }}
"
    );
    for m in &service.methods {
        let input = ty(&m.input_type);
        let output = ty(&m.output_type);
        let p = path(service, m);
        docs(&m.comments, "        ", buf);
        let name = &m.name;
        let body = match (m.client_streaming, m.server_streaming) {
            (false, false) => format!(
                "pub async fn {name}(&self, request: impl IntoRequest<{input}>) -> Result<Response<{output}>, Status> {{
            self.channel.unary(\"{p}\", request.into_request()).await
        }}"
            ),
            (false, true) => format!(
                "pub async fn {name}(&self, request: impl IntoRequest<{input}>) -> Result<Streaming<{output}>, Status> {{
            self.channel.server_streaming(\"{p}\", request.into_request()).await
        }}"
            ),
            (true, false) => format!(
                "pub async fn {name}(&self, requests: impl IntoStreamingRequest<Message = {input}>) -> Result<Response<{output}>, Status> {{
            self.channel.client_streaming(\"{p}\", requests).await
        }}

        /// `{proto}` with a sink: send requests, then `finish` for the response.
        pub async fn {name}_sink(&self, request: impl IntoRequest<()>) -> Result<ClientStreamSink<{input}, {output}>, Status> {{
            self.channel.client_stream_sink(\"{p}\", request.into_request()).await
        }}",
                proto = m.proto_name
            ),
            (true, true) => format!(
                "pub async fn {name}(&self, requests: impl IntoStreamingRequest<Message = {input}>) -> Result<Streaming<{output}>, Status> {{
            self.channel.bidi_streaming(\"{p}\", requests).await
        }}

        /// `{proto}` with a sink for the requests and a stream of responses.
        pub async fn {name}_sink(&self, request: impl IntoRequest<()>) -> Result<(RequestSink<{input}>, Streaming<{output}>), Status> {{
            self.channel.bidi_stream_sink(\"{p}\", request.into_request()).await
        }}",
                proto = m.proto_name
            ),
        };
        let _ = writeln!(buf, "        {body}\n");
    }
    buf.push_str("    }\n}\n\n");
}

#[cfg(test)]
mod tests {
    use prost_build::{Comments, Method, Service};

    use super::server;

    fn method(name: &str, server_streaming: bool) -> Method {
        Method {
            name: name.to_lowercase(),
            proto_name: name.to_owned(),
            comments: Comments::default(),
            input_type: "Msg".to_owned(),
            output_type: "Msg".to_owned(),
            input_proto_type: ".pkg.Msg".to_owned(),
            output_proto_type: ".pkg.Msg".to_owned(),
            options: Default::default(),
            client_streaming: false,
            server_streaming,
        }
    }

    fn service(methods: Vec<Method>) -> Service {
        Service {
            name: "Svc".to_owned(),
            proto_name: "Svc".to_owned(),
            package: "pkg".to_owned(),
            comments: Comments::default(),
            methods,
            options: Default::default(),
        }
    }

    #[test]
    fn sync_unary_methods_are_plain_functions_served_with_unary_sync() {
        let svc = service(vec![method("Get", false), method("Put", false)]);
        let mut buf = String::new();
        server(&svc, &["pkg.Svc.Get".to_owned()], &mut buf);
        assert!(
            buf.contains("fn get(&self, request: Request<super::Msg>) -> Result<Response<super::Msg>, Status>;"),
            "{buf}"
        );
        assert!(buf.contains("builder.unary_sync(\"/pkg.Svc/Get\""), "{buf}");
        // The others stay async.
        assert!(
            buf.contains("fn put(&self, request: Request<super::Msg>) -> impl Future<"),
            "{buf}"
        );
        assert!(buf.contains("builder.unary(\"/pkg.Svc/Put\""), "{buf}");
    }

    #[test]
    fn a_streaming_method_named_sync_is_a_compile_error() {
        let svc = service(vec![method("Watch", true)]);
        let mut buf = String::new();
        server(&svc, &["pkg.Svc.Watch".to_owned()], &mut buf);
        assert!(
            buf.contains(
                "compile_error!(\"tram-build: sync_unary names pkg.Svc.Watch, which streams\")"
            ),
            "{buf}"
        );
    }
}
