//! The engine's own logic (rank-order all-reduce and reduce-scatter built from a transport's
//! all-gather, as the NCCL engine uses them) over an in-process transport: two "ranks" are two
//! threads meeting at a barrier.

use remat_core::{CollectiveKind, Error};
use remat_dist::{sum_in_rank_order, Collective};

mod common;
use common::job;

#[test]
fn all_reduce_is_the_rank_order_sum_on_every_rank() {
    let results = job(3, |rank, e| {
        // Seven values over three ranks (padded), and values whose f32 sum depends on order.
        let a = e.all_reduce((0..7).map(|i| (rank * 10 + i) as f32).collect()).unwrap();
        let tricky = [[1.0e8f32, 1.0], [-1.0e8, 1.0e-8], [3.0, -1.0]][rank].to_vec();
        let b = e.all_reduce(tricky).unwrap();
        let c = e.reduce_scatter((0..6).map(|i| (i + 100 * rank) as f32).collect()).unwrap();
        let g = e.all_gather(vec![rank as u8; 2]).unwrap();
        let bc = e.broadcast(vec![rank as u8 + 1; 3], 2).unwrap();
        e.barrier().unwrap();
        (a, b, c, g, bc, e.bytes_sent() > 0)
    });
    let sums: Vec<f32> = (0..7).map(|i| (i + (10 + i) + (20 + i)) as f32).collect();
    let tricky = sum_in_rank_order(&[1.0e8, 1.0, -1.0e8, 1.0e-8, 3.0, -1.0], 3);
    for (rank, (a, b, c, g, bc, sent)) in results.into_iter().enumerate() {
        assert_eq!(a, sums, "rank {rank}");
        assert_eq!(b, tricky, "rank {rank}: the rank-order sum, bit for bit");
        let chunk: Vec<f32> = (0..2).map(|j| (3 * (2 * rank + j) + 300) as f32).collect();
        assert_eq!(c, chunk, "rank {rank}: its chunk of the sum");
        assert_eq!(g, vec![0, 0, 1, 1, 2, 2]);
        assert_eq!(bc, vec![3, 3, 3]);
        assert!(sent);
    }
}

#[test]
fn all_reduces_of_different_lengths_are_refused_on_every_rank_and_stop_the_engine() {
    // The lengths of the gpt example's --bucket-kib 1 / 64 reproducer: exchanged as they were,
    // MPI overran its receive buffers (`malloc(): corrupted top size`).
    let results = job(2, |rank, e| {
        let first = e.all_reduce(vec![1.0; [7, 4096][rank]]).map(|_| ());
        let later = e.barrier();
        (first, later)
    });
    let expected = "ranks disagree: rank 0 calls all-reduce of 7 values (its collective #1), rank 1 calls all-reduce of 4096 values (its collective #1)";
    for (rank, (first, later)) in results.into_iter().enumerate() {
        let first = first.unwrap_err();
        assert!(matches!(first, Error::Collective { kind: CollectiveKind::Mismatch, .. }), "rank {rank}: {first:?}");
        let first = first.to_string();
        assert!(first.starts_with(expected), "rank {rank}: {first}");
        assert!(!first.contains('\n'), "one line: {first}");
        // Nothing more is exchanged once ranks disagree: the barrier is refused at once.
        let later = later.unwrap_err();
        assert!(matches!(later, Error::Collective { kind: CollectiveKind::Stopped, .. }), "rank {rank}: {later:?}");
        assert!(later.to_string().contains("not started: an earlier collective failed"), "rank {rank}: {later}");
    }
}

#[test]
fn different_operations_and_sequences_are_named() {
    let results = job(3, |rank, e| {
        if rank == 2 {
            e.barrier().unwrap_err() // one call ahead of the others
        } else {
            e.broadcast(vec![0; 4], 0).unwrap_err()
        }
    });
    for err in results {
        assert!(matches!(err, Error::Collective { kind: CollectiveKind::Mismatch, .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.starts_with(
                "ranks disagree: rank 0 calls broadcast of 4 bytes from rank 0 (its collective #1), rank 2 calls barrier (its collective #1)"
            ),
            "{text}"
        );
    }
}

#[test]
fn a_rank_that_leaves_stops_the_others_at_their_next_collective() {
    let results = job(2, |rank, e| {
        if rank == 1 {
            // A program that failed before its first collective (a --resume file it cannot
            // read): it tells the others as it ends.
            e.leave().unwrap_err()
        } else {
            e.all_gather(vec![0; 8]).unwrap_err()
        }
    });
    // Both ranks name rank 1 as the one that left.
    for err in &results {
        assert!(matches!(err, Error::Collective { kind: CollectiveKind::PeerFailed { rank: 1 }, .. }), "{err:?}");
    }
    let results: Vec<String> = results.iter().map(Error::to_string).collect();
    assert!(
        results[0].starts_with("ranks disagree: rank 0 calls all-gather of 8 bytes (its collective #1), rank 1 has left the job after 0 collective(s) (its program ended or failed: see its own message)"),
        "{}",
        results[0]
    );
    assert!(results[1].contains("rank 1 has left the job"), "{}", results[1]);
}

#[test]
fn ranks_that_all_leave_end_cleanly() {
    let results = job(3, |rank, e| {
        let sums = e.all_reduce(vec![rank as f32; 2]).unwrap();
        let left = e.leave().map_err(|e| e.to_string());
        let after = e.barrier().is_err();
        (sums, left, after)
    });
    for (sums, left, after) in results {
        assert_eq!(sums, vec![3.0, 3.0]);
        assert_eq!(left, Ok(()));
        assert!(after, "no collective after leaving");
    }
}
