//! tram protocol frames as a message-stream codec.

use crate::conn::WriteBuf;
use bytes::BytesMut;
use tram_wire::{Frame, FrameDecoder};

use super::{Decoder, Encoder};

/// tram [`Frame`]s, decoded with the protocol's limits: the codec the RPC
/// layer speaks, usable directly for tests, proxies and tools.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    decoder: FrameDecoder,
}

impl FrameCodec {
    /// A codec that rejects frame bodies over `max_frame_size` bytes.
    pub fn new(max_frame_size: u32) -> Self {
        FrameCodec {
            decoder: FrameDecoder::new(max_frame_size),
        }
    }
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec::new(tram_wire::Settings::DEFAULT.max_frame_size)
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = tram_wire::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, tram_wire::Error> {
        self.decoder.decode(src)
    }

    fn frame_len(&self, src: &[u8]) -> Option<usize> {
        self.decoder.frame_len(src)
    }
}

impl Encoder<Frame> for FrameCodec {
    type Error = std::convert::Infallible;

    fn encode(&mut self, item: Frame, dst: &mut WriteBuf) -> Result<(), Self::Error> {
        self.encode(&item, dst)
    }
}

impl Encoder<&Frame> for FrameCodec {
    type Error = std::convert::Infallible;

    fn encode(&mut self, item: &Frame, dst: &mut WriteBuf) -> Result<(), Self::Error> {
        dst.reserve(item.encoded_len());
        item.encode(dst);
        Ok(())
    }
}
