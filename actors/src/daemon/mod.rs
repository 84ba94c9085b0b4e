//! The local daemon: one process owns a store's writer and serves it over a Unix socket to the
//! owner's CLI, to every agent's `annal mcp` bridge and to non-Rust runtimes that capture.
//!
//! # Layout
//!
//! - [`protocol`]: length-prefixed JSON frames ([`FrameCodec`], tokio-util's
//!   `LengthDelimitedCodec` configured for the protocol), the closed [`Request`] enum, the
//!   [`Reply`] shape and the fixed [`DaemonErrorCode`]s (`docs/protocol.md`).
//! - [`server`]: [`serve`] (one task per connection, peer uid checked, bounded frames, idle
//!   exit, `stop`) and the [`Dispatcher`] that answers a request over an [`Engine`](crate::Engine)
//!   (also run in-process by `--no-daemon`).
//! - [`client`]: [`DaemonClient`], one connection: the socket's directory and the peer's uid
//!   checked before anything is sent, a request's size checked before it is written, every wait
//!   bounded.
//! - `page`: the owner's `query` page, kept typed until its events are written into the reply
//!   frame.
//! - [`summary`]: the `audit_summary` answer, the audit trail folded per actor.
//! - [`runtime_dir`]: the one rule for a private directory (owned by the user, 0700), which the
//!   daemon applies before it binds and every client before it connects.
//!
//! Where the socket lives, the socket file's mode, the on-demand start and the idle exit policy
//! belong to the `annal` binary, which owns the process.

pub mod client;
mod page;
pub mod protocol;
pub mod runtime_dir;
pub mod server;
mod slots;
pub mod summary;

pub use client::{ClientError, DaemonClient, TrustError, check_request_size};
pub use page::owner_query;
pub use protocol::{
    DaemonError, DaemonErrorCode, FrameCodec, MAX_FRAME_BYTES, Reply, Request, ToolReply,
    WireOutcome,
};
pub use runtime_dir::{RuntimeDirError, check_private_dir, create_private_dir};
pub use server::{ConnectionState, Dispatcher, EnableHook, ServeEnd, ServeOptions, serve};
