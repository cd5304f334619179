//! The check an [`crate::Engine`] makes before every collective: ranks first exchange a
//! fixed-size description of the call they are about to make (operation, length, root, its number
//! in the rank's sequence) and go on only when every rank describes the same call.
//!
//! A collective whose lengths differ between ranks overruns the receive buffers of MPI (heap
//! corruption) or ends in the library's internals; one whose operations differ (an all-reduce on
//! one rank, a barrier on another) hangs or fails the same way. The description has the same 32
//! bytes on every rank whatever the call, so exchanging it is always safe, and a difference is an
//! error on every rank naming both calls.

use remat_core::{CollectiveKind, Error, Result};

/// What a rank is about to do with the other ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    AllReduce,
    Broadcast,
    AllGather,
    ReduceScatter,
    Barrier,
    /// The rank's program is ending (it finished, or failed): no more collectives from it.
    Leave,
}

/// One collective as a rank describes it to the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Call {
    pub op: Op,
    /// Values (all-reduce, reduce-scatter) or bytes (broadcast, all-gather).
    pub len: u64,
    /// The broadcasting rank (0 for other operations).
    pub root: u64,
    /// The call's number on its rank, from 1.
    pub seq: u64,
}

/// Marks a description as remat's (anything else is a rank running another program or version).
const MAGIC: u64 = u64::from_le_bytes(*b"rematCL1");

/// Bytes of one [`Call`] on the wire.
pub(crate) const CALL_BYTES: usize = 32;

impl Op {
    fn code(self) -> u64 {
        match self {
            Op::AllReduce => 1,
            Op::Broadcast => 2,
            Op::AllGather => 3,
            Op::ReduceScatter => 4,
            Op::Barrier => 5,
            Op::Leave => 6,
        }
    }

    fn from_code(code: u64) -> Option<Op> {
        [Op::AllReduce, Op::Broadcast, Op::AllGather, Op::ReduceScatter, Op::Barrier, Op::Leave]
            .into_iter()
            .find(|op| op.code() == code)
    }
}

impl Call {
    pub(crate) fn encode(&self) -> [u8; CALL_BYTES] {
        let mut out = [0u8; CALL_BYTES];
        let words = [MAGIC ^ self.op.code(), self.len, self.root, self.seq];
        for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        out
    }

    /// `None` when the bytes are not a description remat wrote.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Call> {
        if bytes.len() != CALL_BYTES {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let op = Op::from_code(word(0) ^ MAGIC)?;
        Some(Call { op, len: word(1), root: word(2), seq: word(3) })
    }

    /// "calls all-reduce of 256 values (its collective #5)", "has left the job (..)".
    pub(crate) fn describe(&self) -> String {
        let (len, root, seq) = (self.len, self.root, self.seq);
        let what = match self.op {
            Op::AllReduce => format!("all-reduce of {len} values"),
            Op::Broadcast => format!("broadcast of {len} bytes from rank {root}"),
            Op::AllGather => format!("all-gather of {len} bytes"),
            Op::ReduceScatter => format!("reduce-scatter of {len} values"),
            Op::Barrier => "barrier".to_string(),
            Op::Leave => {
                return format!(
                    "has left the job after {} collective(s) (its program ended or failed: see its own message)",
                    seq - 1
                )
            }
        };
        format!("calls {what} (its collective #{seq})")
    }
}

/// `Ok` when every rank's description (`all`: [`CALL_BYTES`] per rank, in rank order) is the
/// same; else the first rank that differs from rank 0, described beside rank 0 (the same text on
/// every rank).
pub(crate) fn compare(all: &[u8]) -> Result<()> {
    let calls: Vec<Option<Call>> = all.chunks_exact(CALL_BYTES).map(Call::decode).collect();
    let show = |rank: usize, call: &Option<Call>| match call {
        Some(c) => format!("rank {rank} {}", c.describe()),
        None => format!("rank {rank} sent something that is not a remat collective (another program or version)"),
    };
    let Some(first) = calls.first() else { return Ok(()) };
    match calls.iter().enumerate().skip(1).find(|(_, c)| *c != first) {
        None if first.is_some() => Ok(()),
        None => Err(Error::collective(CollectiveKind::Mismatch, format!("ranks disagree: {}", show(0, first)))),
        Some((rank, other)) => {
            let left = |c: &Option<Call>| matches!(c, Some(Call { op: Op::Leave, .. }));
            // A rank that left ended or failed its program: the others' step cannot go on.
            let (kind, advice) = match (left(first), left(other)) {
                (true, _) => (CollectiveKind::PeerFailed { rank: 0 }, ""),
                (_, true) => (CollectiveKind::PeerFailed { rank }, ""),
                _ => (
                    CollectiveKind::Mismatch,
                    " (every rank must run the same collectives in the same order: were they started with the same settings?)",
                ),
            };
            let message = format!("ranks disagree: {}, {}{advice}", show(0, first), show(rank, other));
            Err(Error::collective(kind, message))
        }
    }
}
