//! NCCL without a GPU: `Nccl::init` says what is missing (no panic); with a GPU and NCCL, a
//! one-rank job's collectives are the identity.
#![cfg(feature = "nccl")]

#[path = "../../benches/common/require.rs"]
mod require;

use remat_cuda::Nccl;
use remat_dist::{Collective, Local};

#[test]
fn nccl_starts_or_names_what_is_missing() {
    match Nccl::init(&mut Local, 0) {
        Ok(mut engine) => {
            assert_eq!((engine.rank(), engine.world_size()), (0, 1));
            assert_eq!(engine.all_reduce(vec![1.5, -2.0, 3.25]).unwrap(), vec![1.5, -2.0, 3.25]);
            assert_eq!(engine.all_gather(vec![7, 8]).unwrap(), vec![7, 8]);
            assert_eq!(engine.broadcast(vec![1, 2, 3], 0).unwrap(), vec![1, 2, 3]);
            engine.barrier().unwrap();
        }
        Err(e) => {
            let start = matches!(e, remat_core::Error::Collective { kind: remat_core::CollectiveKind::Start, .. });
            assert!(start, "a start failure: {e:?}");
            let text = e.to_string();
            assert!(
                text.contains("NCCL (libnccl.so.2) was not found") || text.contains("CUDA driver"),
                "unexpected error: {text}"
            );
            require::skip("nccl", format!("no GPU job here: {text}"));
        }
    }
}
