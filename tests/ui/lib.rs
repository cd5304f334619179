//! The compile-time checks of `#[checkpoint]` live in `ui.rs` (a trybuild test) and the cases in
//! `fail/` and `pass/`; this library is empty.
