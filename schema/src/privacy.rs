//! The privacy boundary: what is never persisted and never returned (ARCHITECTURE.md section 9).
//!
//! The event types already make these unrepresentable (closed objects, closed enums, bounded
//! identifiers). This list names the fields so tests can plant them at every level of an event
//! and prove they are refused, and so raw files and responses can be scanned for them.

/// Field names a prohibited value would travel under. None of them is a v0 field, so any of
/// them at any level of an event is refused.
pub const PROHIBITED_FIELD_NAMES: &[&str] = &[
    "screenshot",
    "screenshots",
    "video",
    "audio",
    "accessibility_tree",
    "ax_tree",
    "typed_text",
    "text",
    "keystrokes",
    "key_events",
    "text_length",
    "clipboard",
    "arguments",
    "args",
    "result",
    "results",
    "file_path",
    "path",
    "window_title",
    "title",
    "url",
    "pid",
    "window_id",
    "diagnostic",
    "diagnostics",
    "message",
    "policy",
    "session_label",
    "raw_session_id",
];
