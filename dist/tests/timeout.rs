//! A collective that never finishes ends in `Error::Collective { kind: Timeout }` after
//! `REMAT_DIST_TIMEOUT` seconds. A test binary of its own: the variable is read by every engine
//! this process starts, and the other tests' engines must not inherit so short a wait.

use remat_core::{CollectiveKind, Error, Result};
use remat_dist::{Collective, Engine, Transport};
use std::time::Duration;

/// One rank whose exchanges never return (a peer that died without a word): its engine is
/// left running when the wait times out.
struct Silent;

impl Transport for Silent {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        2
    }
    fn all_gather_bytes(&mut self, _: &[u8]) -> Result<Vec<u8>> {
        std::thread::sleep(Duration::from_secs(3600));
        unreachable!("the test ends first")
    }
    fn broadcast_bytes(&mut self, _: &mut [u8], _: usize) -> Result<()> {
        unreachable!("every collective starts with an all-gather of the call")
    }
    fn barrier(&mut self) -> Result<()> {
        unreachable!("every collective starts with an all-gather of the call")
    }
    fn bytes_sent(&self) -> u64 {
        0
    }
}

#[test]
fn a_collective_past_the_timeout_is_a_timeout_error() {
    std::env::set_var("REMAT_DIST_TIMEOUT", "0.2");
    let mut engine = Engine::start("silent", || Ok(Silent)).unwrap();
    let err = engine.barrier().unwrap_err();
    assert!(matches!(err, Error::Collective { kind: CollectiveKind::Timeout, .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.starts_with("rank 0: barrier (collective #1) did not finish within "), "{text}");
    assert!(text.ends_with("(set REMAT_DIST_TIMEOUT to wait longer)") && !text.contains('\n'), "{text}");
}
