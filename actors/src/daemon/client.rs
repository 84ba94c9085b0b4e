//! A client of the daemon's socket: what `annal`'s commands and `annal mcp` speak through.

use std::path::Path;

use tokio::net::UnixStream;

use super::protocol::{DaemonError, FrameError, Reply, Request, read_frame, write_frame};

/// Why a request got no result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
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
    /// The connected socket.
    stream: UnixStream,
}

impl DaemonClient {
    /// Connects to the daemon listening at `socket`.
    pub async fn connect(socket: &Path) -> std::io::Result<Self> {
        Ok(Self {
            stream: UnixStream::connect(socket).await?,
        })
    }

    /// Sends `request` and waits for its reply's result.
    /// A daemon that refuses the connection itself (another uid, too many connections) answers
    /// before it reads anything and closes: that refusal is returned even when the request
    /// could not be written.
    pub async fn request(&mut self, request: &Request) -> Result<serde_json::Value, ClientError> {
        let written = write_frame(&mut self.stream, request).await;
        let body = match (written, read_frame(&mut self.stream).await) {
            (_, Ok(body)) => body,
            (Err(write), Err(_)) => return Err(write.into()),
            (Ok(()), Err(read)) => return Err(read.into()),
        };
        match serde_json::from_slice::<Reply>(&body).map_err(|_| ClientError::BadReply)? {
            Reply::Ok(value) => Ok(value),
            Reply::Error(error) => Err(ClientError::Daemon(error)),
        }
    }
}
