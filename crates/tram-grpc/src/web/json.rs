//! Protobuf's canonical JSON mapping for Connect's `application/json`
//! calls: the messages of a method, from the descriptors `tram-build`
//! writes (`tram::include_file_descriptor_set!()`), turned from JSON into
//! protobuf on the way in and back on the way out, with `prost-reflect`.
//! tram's handlers only ever see protobuf.

use bytes::Bytes;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, SerializeOptions};
use tram::Status;

use crate::GatewayConfig;

/// The messages of every method the descriptors describe.
#[derive(Debug, Clone)]
pub(crate) struct Json {
    pool: DescriptorPool,
}

/// Which side of a method a message is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Side {
    Request,
    Response,
}

impl Json {
    /// From the config's descriptors; why there is no JSON, if not.
    pub(crate) fn from_config(config: &GatewayConfig) -> Result<Json, String> {
        if config.descriptors.is_empty() {
            return Err("JSON needs the services' descriptors (GatewayConfig::descriptors)".into());
        }
        let mut pool = DescriptorPool::new();
        for set in &config.descriptors {
            pool.decode_file_descriptor_set(set.clone())
                .map_err(|e| format!("the gateway's descriptors do not decode: {e}"))?;
        }
        Ok(Json { pool })
    }

    /// The message type of `side` of the method at `path`
    /// (`/package.Service/Method`).
    pub(crate) fn message(&self, path: &str, side: Side) -> Option<MessageDescriptor> {
        let (service, method) = path.strip_prefix('/')?.split_once('/')?;
        let method = self
            .pool
            .get_service_by_name(service)?
            .methods()
            .find(|m| m.name() == method)?;
        Some(match side {
            Side::Request => method.input(),
            Side::Response => method.output(),
        })
    }

    /// Whether the method at `path` is marked free of side effects
    /// (`option idempotency_level = NO_SIDE_EFFECTS`): Connect lets such
    /// methods be called with GET.
    pub(crate) fn side_effect_free(&self, path: &str) -> bool {
        let Some((service, method)) = path.strip_prefix('/').and_then(|p| p.split_once('/')) else {
            return false;
        };
        let Some(method) = self
            .pool
            .get_service_by_name(service)
            .and_then(|s| s.methods().find(|m| m.name() == method))
        else {
            return false;
        };
        // MethodOptions.idempotency_level is field 34; NO_SIDE_EFFECTS is 1.
        method
            .options()
            .get_field_by_number(34)
            .and_then(|v| v.as_enum_number())
            == Some(1)
    }

    /// A JSON message of `path`'s `side`, as protobuf.
    pub(crate) fn to_proto(&self, path: &str, side: Side, json: &[u8]) -> Result<Bytes, Status> {
        let desc = self
            .message(path, side)
            .ok_or_else(|| Status::unimplemented(format!("no descriptor for {path}")))?;
        let mut de = serde_json::Deserializer::from_slice(json);
        let msg = DynamicMessage::deserialize(desc, &mut de)
            .and_then(|m| de.end().map(|()| m))
            .map_err(|e| {
                Status::invalid_argument(format!("request is not valid JSON for its message: {e}"))
            })?;
        Ok(msg.encode_to_vec().into())
    }

    /// A protobuf message of `path`'s `side`, as JSON.
    pub(crate) fn to_json(&self, path: &str, side: Side, proto: Bytes) -> Result<Bytes, Status> {
        let desc = self
            .message(path, side)
            .ok_or_else(|| Status::unimplemented(format!("no descriptor for {path}")))?;
        let msg = DynamicMessage::decode(desc, proto)
            .map_err(|e| Status::internal(format!("response does not decode: {e}")))?;
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::new(&mut out);
        msg.serialize_with_options(&mut ser, &SerializeOptions::new())
            .map_err(|e| Status::internal(format!("response as JSON: {e}")))?;
        Ok(out.into())
    }
}
