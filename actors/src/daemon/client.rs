//! A client of the daemon's socket: what `annal`'s commands and `annal mcp` speak through.
//!
//! - **The daemon is checked before anything is sent.** [`DaemonClient::connect`] refuses a
//!   socket whose directory is not private to this user ([`check_private_dir`]) and, once
//!   connected, a peer whose uid (`SO_PEERCRED`) is not this process's effective uid: both are
//!   [`ClientError::Untrusted`], naming the path and the fix, and not one byte is written.
//! - **A request too large for one frame is never sent.** [`DaemonClient::request`] measures
//!   the encoded request first and answers [`ClientError::RequestTooLarge`] at once; the
//!   connection stays usable.
//! - **Every wait has a deadline**: connecting ([`CONNECT_DEADLINE_MS`]), writing a request
//!   ([`REQUEST_WRITE_DEADLINE_MS`]) and waiting for its reply ([`REPLY_DEADLINE_MS`]). A
//!   connection that missed a deadline may still get a late reply, so it must be dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;

use tokio::net::UnixStream;

use super::protocol::{
    DaemonError, FrameCodec, FrameError, FramedStream, MAX_FRAME_BYTES, Reply, Request, next_frame,
    send_frame,
};
use super::runtime_dir::{RuntimeDirError, check_private_dir};

/// Longest a client waits for the daemon to accept its connection, in milliseconds.
pub const CONNECT_DEADLINE_MS: u64 = 2_000;

/// Longest a client waits for its request to be written to the socket, in milliseconds (the
/// daemon reads every request at once; a full socket buffer that long is a stuck daemon).
pub const REQUEST_WRITE_DEADLINE_MS: u64 = 5_000;

/// Margin the reply deadline gives the daemon above the engine's own control deadline, in
/// milliseconds (the daemon answers its engine's timeout itself, with a message).
const REPLY_MARGIN_MS: u64 = 5_000;

/// Longest a client waits for the reply to one request, in milliseconds: above the engine's
/// longest operation (`CONTROL_DEADLINE_MS`, which covers creating a key), so the daemon's own
/// answer to a slow engine comes back first.
pub const REPLY_DEADLINE_MS: u64 = crate::config::CONTROL_DEADLINE_MS + REPLY_MARGIN_MS;

/// Why the client will not speak to what is at a socket's path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// The socket's directory is not private to this user.
    #[error("the daemon's socket directory is not safe: {0}")]
    Dir(#[from] RuntimeDirError),
    /// The process listening at the socket runs as another user.
    #[error(
        "the socket {} is served by uid {peer_uid}, not by this user (uid {own_uid}): nothing \
         was sent; stop that process and remove the socket, or pass --socket PATH",
        socket.display()
    )]
    PeerOfAnotherUser {
        /// The socket.
        socket: PathBuf,
        /// The peer's effective uid, as the kernel reports it.
        peer_uid: u32,
        /// This process's effective uid.
        own_uid: u32,
    },
    /// The kernel did not say who the peer is.
    #[error(
        "the peer at {} could not be identified ({source}): nothing was sent; remove the \
         socket if no daemon of yours serves it, or pass --socket PATH",
        socket.display()
    )]
    PeerUnknown {
        /// The socket.
        socket: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
}

/// Why a request got no result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No daemon answers at the socket (none runs, or its socket is missing).
    #[error("no daemon answers at the socket: {0}")]
    Unreachable(std::io::Error),
    /// What is at the socket is not this user's daemon; nothing was sent.
    #[error(transparent)]
    Untrusted(#[from] TrustError),
    /// The request does not fit one frame; nothing was sent and the connection is usable.
    #[error(
        "the request is {bytes} bytes encoded, over the protocol's {MAX_FRAME_BYTES}-byte frame; \
         nothing was sent: shorten its arguments"
    )]
    RequestTooLarge {
        /// Its encoded size.
        bytes: usize,
    },
    /// The daemon did not take the request, or did not answer it, within its deadline.
    #[error("the daemon did not {what} within {deadline_ms} ms")]
    TimedOut {
        /// `accept the connection`, `take the request` or `answer`.
        what: &'static str,
        /// The deadline that passed.
        deadline_ms: u64,
    },
    /// The socket failed or the daemon closed the connection.
    #[error("the daemon connection failed: {0}")]
    Frame(#[from] FrameError),
    /// The daemon answered with an error.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// The daemon's reply was not a reply of this protocol.
    #[error("the daemon's reply is not one of this protocol")]
    BadReply,
}

/// One connection to a daemon.
#[derive(Debug)]
pub struct DaemonClient {
    /// The connected socket, with its frame buffers.
    stream: FramedStream<UnixStream>,
}

/// Counts the bytes written to it (a request's encoded size, without keeping the bytes).
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Checks that `request` fits one frame: its encoded size, or
/// [`ClientError::RequestTooLarge`]. What every front-end calls before it sends anything.
pub fn check_request_size(request: &Request) -> Result<usize, ClientError> {
    let mut count = ByteCount(0);
    serde_json::to_writer(&mut count, request).map_err(|_| FrameError::Encode)?;
    if count.0 > MAX_FRAME_BYTES {
        return Err(ClientError::RequestTooLarge { bytes: count.0 });
    }
    Ok(count.0)
}

impl DaemonClient {
    /// Connects to the daemon listening at `socket`, after checking its directory, and checks
    /// that the peer runs as this user before returning: on any doubt, nothing is sent.
    ///
    /// [`ClientError::Unreachable`] when no daemon is there (the directory or the socket is
    /// missing, or nothing listens); [`ClientError::Untrusted`] when something is there that
    /// is not this user's daemon.
    pub async fn connect(socket: &Path) -> Result<Self, ClientError> {
        if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
            match check_private_dir(dir) {
                Ok(()) => {}
                Err(RuntimeDirError::Missing { .. }) => {
                    return Err(ClientError::Unreachable(
                        std::io::ErrorKind::NotFound.into(),
                    ));
                }
                Err(error) => return Err(TrustError::Dir(error).into()),
            }
        }
        let stream = match tokio::time::timeout(
            Duration::from_millis(CONNECT_DEADLINE_MS),
            UnixStream::connect(socket),
        )
        .await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Err(ClientError::Unreachable(error)),
            Err(_) => {
                return Err(ClientError::TimedOut {
                    what: "accept the connection",
                    deadline_ms: CONNECT_DEADLINE_MS,
                });
            }
        };
        let own_uid = rustix::process::geteuid().as_raw();
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == own_uid => Ok(Self {
                stream: FramedStream::new(stream, FrameCodec::new()),
            }),
            Ok(cred) => Err(TrustError::PeerOfAnotherUser {
                socket: socket.to_path_buf(),
                peer_uid: cred.uid(),
                own_uid,
            }
            .into()),
            Err(source) => Err(TrustError::PeerUnknown {
                socket: socket.to_path_buf(),
                source,
            }
            .into()),
        }
    }

    /// Sends `request` and waits for its reply's result, each within its deadline. A request
    /// over [`MAX_FRAME_BYTES`] is refused before anything is written.
    ///
    /// A daemon that refuses the connection itself (another uid, too many connections) answers
    /// before it reads anything and closes: that refusal is returned even when the request
    /// could not be written.
    pub async fn request(&mut self, request: &Request) -> Result<serde_json::Value, ClientError> {
        self.request_as(request).await
    }

    /// [`Self::request`], reading the result as `T` straight from the frame (no JSON tree in
    /// between): a result that is not a `T` is [`ClientError::BadReply`].
    pub async fn request_as<T: DeserializeOwned>(
        &mut self,
        request: &Request,
    ) -> Result<T, ClientError> {
        check_request_size(request)?;
        let written = self.send(request).await;
        match (written, self.receive_as().await) {
            (_, Ok(result)) => Ok(result),
            (Err(write), _) => Err(write),
            (Ok(()), Err(read)) => Err(read),
        }
    }

    /// Writes `request` within its deadline, without waiting for the reply: the daemon starts
    /// on it while the caller does other work, then [`Self::receive_as`] reads the reply
    /// (`annal report` asks for its next page before it folds the current one). Replies come
    /// in the order the requests were written.
    pub async fn send(&mut self, request: &Request) -> Result<(), ClientError> {
        check_request_size(request)?;
        match tokio::time::timeout(
            Duration::from_millis(REQUEST_WRITE_DEADLINE_MS),
            send_frame(&mut self.stream, request),
        )
        .await
        {
            Ok(written) => written.map_err(ClientError::from),
            Err(_) => Err(ClientError::TimedOut {
                what: "take the request",
                deadline_ms: REQUEST_WRITE_DEADLINE_MS,
            }),
        }
    }

    /// Reads the reply to the oldest request [`Self::send`] wrote that no read took yet (the
    /// daemon answers a connection's requests in order), within the reply deadline, as `T`.
    pub async fn receive_as<T: DeserializeOwned>(&mut self) -> Result<T, ClientError> {
        let body = match tokio::time::timeout(
            Duration::from_millis(REPLY_DEADLINE_MS),
            next_frame(&mut self.stream),
        )
        .await
        {
            Ok(Ok(body)) => body,
            Ok(Err(read)) => return Err(read.into()),
            Err(_) => {
                return Err(ClientError::TimedOut {
                    what: "answer",
                    deadline_ms: REPLY_DEADLINE_MS,
                });
            }
        };
        match serde_json::from_slice::<Reply<T>>(&body).map_err(|_| ClientError::BadReply)? {
            Reply::Ok(value) => Ok(value),
            Reply::Error(error) => Err(ClientError::Daemon(error)),
        }
    }
}
