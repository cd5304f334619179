//! Where remat's warnings go: the `log` facade when the program has a logger that shows
//! warnings, else standard error — so a warning reaches the user without code of theirs.
//!
//! `REMAT_WARNINGS=off` silences the standard-error fallback (a logger, if any, still gets
//! them).

/// The environment variable that silences the standard-error fallback (`off`).
pub const WARNINGS_VAR: &str = "REMAT_WARNINGS";

/// Emits one warning.
pub(crate) fn emit(message: &str) {
    if log::log_enabled!(target: "remat", log::Level::Warn) {
        log::warn!(target: "remat", "{message}");
    } else if std::env::var(WARNINGS_VAR).map_or(true, |v| v != "off") {
        eprintln!("remat warning: {}", crate::text::one_line(message));
    }
}
