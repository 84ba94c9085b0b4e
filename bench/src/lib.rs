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

/// The `FIGURE <name> <value> <unit>` line for one figure.
pub fn figure_line(name: &str, value: impl std::fmt::Display, unit: &str) -> String {
    format!("FIGURE {name} {value} {unit}")
}

/// Prints one [`figure_line`] on stdout, after criterion's own output, so a script can collect
/// the figures without parsing criterion's report.
pub fn print_figure(name: &str, value: impl std::fmt::Display, unit: &str) {
    println!("{}", figure_line(name, value, unit));
}

#[cfg(test)]
mod tests {
    #[test]
    fn figure_line_shape() {
        assert_eq!(
            super::figure_line("profile.seal_ns", 4409, "ns"),
            "FIGURE profile.seal_ns 4409 ns"
        );
    }
}
