//! Compile-time checks of `#[checkpoint]` (trybuild). The `.stderr` snapshots of the fail cases
//! depend on the compiler's wording, so they run only on the toolchain they were reviewed with.

#[rustversion::stable(1.95)]
#[test]
fn ui_fail() {
    trybuild::TestCases::new().compile_fail("fail/*.rs");
}

#[test]
fn ui_pass() {
    trybuild::TestCases::new().pass("pass/*.rs");
}
