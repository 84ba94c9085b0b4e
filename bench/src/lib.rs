//! annal-bench: criterion benches and the helpers they share.
//!
//! # Layout
//!
//! - `benches/profile.rs`: encode+encrypt and decode+decrypt+validate of one ~700-byte event.
//! - `src/lib.rs`: shared helpers, such as printing `FIGURE <name> <value> <unit>` lines after
//!   criterion's own output.
//!
//! Later benches cover capture, append throughput, queries and store open (ARCHITECTURE.md
//! section 11).
#![forbid(unsafe_code)]
