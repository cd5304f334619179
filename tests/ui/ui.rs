//! Compile-time checks of `#[checkpoint]` (trybuild). The `.stderr` snapshots of the fail cases
//! depend on the compiler's wording, so they run only on the toolchain they were reviewed with
//! (stable 1.95); on any other the fail cases are skipped, saying so on standard error, and
//! `REMAT_REQUIRE` naming `ui` makes that a failure.

#[path = "../../benches/common/require.rs"]
mod require;

/// Whether this is the toolchain the snapshots in `fail/` were reviewed with.
#[rustversion::stable(1.95)]
const REVIEWED: bool = true;
#[rustversion::not(stable(1.95))]
const REVIEWED: bool = false;

#[test]
fn ui_fail() {
    if !REVIEWED {
        return require::skip(
            "ui",
            "the compile-fail snapshots (tests/ui/fail/*.stderr) were reviewed with rustc 1.95 (stable); this \
             toolchain words its errors otherwise",
        );
    }
    trybuild::TestCases::new().compile_fail("fail/*.rs");
}

#[test]
fn ui_pass() {
    trybuild::TestCases::new().pass("pass/*.rs");
}
