//! annal-actors: the imperative shell of annal.
//!
//! # Layout
//!
//! - `cli` (binary `annal`, feature `cli`): the command-line front-end. Today it offers
//!   `inspect` (an offline, read-only decoder of a store) and `doctor` (credential-store
//!   diagnostics).
//!
//! Later work adds the ractor supervision tree (KeyCustody, Writer, Ingress, PolicyGate, Query,
//! AuditJournal), the public `Engine` handle and capture hook, the local daemon socket and the
//! MCP stdio server.
#![forbid(unsafe_code)]
