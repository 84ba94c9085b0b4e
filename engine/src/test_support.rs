//! What the workspace's `harness = false` suites share (feature `simulation`, tests only): the
//! fault suite, the fuzz targets, the crash loop, the simulation, the privacy and load suites
//! print their `FIGURE` lines themselves, so each decides on its own whether `cargo test`'s
//! filter names it.

/// Whether the `harness = false` suite `name` runs: always without a filter, else only when a
/// filter argument is part of its name (`cargo test -- locked` skips every suite).
pub fn suite_selected(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()))
}

/// The environment variable `name` parsed as a `T` (a suite's seed, case count or run time):
/// `None` when it is unset or does not parse, so the suite's default applies.
pub fn env_parsed<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
}

/// Copies the directory tree `from` to `to` as a store's owner holds it (directories 0700,
/// files 0600), so a test may damage, or put back, the copy of a store.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700))?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}
