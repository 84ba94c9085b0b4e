//! The protocol's frames: [`FrameCodec`] (tokio-util's `LengthDelimitedCodec` with the two
//! rules it lacks), the [`FramedStream`] a connection is, and reading and writing one frame.

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::bytes::{Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder, Framed, FramedRead, LengthDelimitedCodec};

use super::{FRAME_HEADER_BYTES, MAX_FRAME_BYTES};

/// Why reading or writing a frame failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The peer closed the connection between frames.
    #[error("the connection was closed")]
    Closed,
    /// The declared length is 0 or above `MAX_FRAME_BYTES`.
    #[error("a frame of {declared_bytes} bytes is outside 1..={MAX_FRAME_BYTES}")]
    TooLarge {
        /// The length the header declared.
        declared_bytes: usize,
    },
    /// The body could not be encoded.
    #[error("the frame could not be encoded")]
    Encode,
    /// The socket failed.
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
}

/// Whether a declared body length is one the protocol allows.
pub(super) fn check_frame_len(declared_bytes: usize) -> Result<usize, FrameError> {
    if (1..=MAX_FRAME_BYTES).contains(&declared_bytes) {
        Ok(declared_bytes)
    } else {
        Err(FrameError::TooLarge { declared_bytes })
    }
}

/// The protocol's frames as a [`tokio_util::codec`] codec: tokio-util's
/// [`LengthDelimitedCodec`] with a 4-byte big-endian length and [`MAX_FRAME_BYTES`] as its
/// largest frame, plus the two rules it does not have:
///
/// - A length of 0 is refused like one above the bound ([`FrameError::TooLarge`], naming the
///   declared length), read from the header before any of the body is waited for.
/// - The body is handed to the codec only once it has arrived whole. The codec reserves the
///   declared length as soon as it reads a header; this way the buffer holds what arrived
///   (grown as `Framed` reads, from 8 KiB), so a peer that declares 512 KiB and sends one byte
///   holds a few KiB.
///
/// At the end of the stream, nothing or a partial header is [`FrameError::Closed`] (the peer
/// closed between frames); a partial body is an `UnexpectedEof` [`FrameError::Io`].
#[derive(Debug)]
pub struct FrameCodec {
    /// The length-prefix codec that splits and writes frames.
    inner: LengthDelimitedCodec,
}

impl FrameCodec {
    /// The codec of this protocol's frames.
    pub fn new() -> Self {
        Self {
            inner: LengthDelimitedCodec::builder()
                .length_field_type::<u32>()
                .big_endian()
                .max_frame_length(MAX_FRAME_BYTES)
                .new_codec(),
        }
    }
}

impl Default for FrameCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        let Some(header) = src
            .get(..FRAME_HEADER_BYTES)
            .and_then(|h| <[u8; FRAME_HEADER_BYTES]>::try_from(h).ok())
        else {
            return Ok(None);
        };
        let declared = usize::try_from(u32::from_be_bytes(header)).unwrap_or(usize::MAX);
        let len = check_frame_len(declared)?;
        if src.len() - FRAME_HEADER_BYTES < len {
            return Ok(None);
        }
        Ok(self.inner.decode(src)?)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.len() < FRAME_HEADER_BYTES => Ok(None),
            None => Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
        }
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, body: Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        check_frame_len(body.len())?;
        Ok(self.inner.encode(body, dst)?)
    }
}

/// A connection that carries frames: the socket with its read and write buffers.
pub type FramedStream<S> = Framed<S, FrameCodec>;

/// The next frame's body from `framed`. `Closed` when the peer ended the connection between
/// frames. Cancel safe: what arrived stays in `framed`'s buffer.
pub async fn next_frame<S: AsyncRead + AsyncWrite + Unpin>(
    framed: &mut FramedStream<S>,
) -> Result<BytesMut, FrameError> {
    framed.next().await.unwrap_or(Err(FrameError::Closed))
}

/// Writes `value` as one frame on `framed`, and flushes it.
pub async fn send_frame<S: AsyncRead + AsyncWrite + Unpin, T: Serialize>(
    framed: &mut FramedStream<S>,
    value: &T,
) -> Result<(), FrameError> {
    let body = serde_json::to_vec(value).map_err(|_| FrameError::Encode)?;
    framed.send(Bytes::from(body)).await
}

/// Reads one frame body from a reader that holds one (a test's bytes; it may read past the
/// frame, so a connection that carries more keeps a [`FramedStream`]). `Closed` when the
/// reader ends before a whole header.
pub async fn read_frame<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Vec<u8>, FrameError> {
    let mut frames = FramedRead::new(reader, FrameCodec::new());
    match frames.next().await {
        Some(frame) => frame.map(|body| body.to_vec()),
        None => Err(FrameError::Closed),
    }
}
