//! [`Nccl`]: the collectives of a multi-GPU job over NCCL, one process per GPU, driven by a
//! `remat_dist::Engine` thread (the NCCL communicator lives and dies on that thread).
//!
//! NCCL's unique id is made by rank 0 and broadcast over a bootstrap collective (MPI), as NCCL
//! jobs are usually started. Sums are rank-order sums like every engine's: gradients are
//! all-gathered on the devices and each rank adds its chunk in rank order (NCCL's own ring
//! reduction adds in ring order, which would make the bits depend on the topology).

use crate::probe;
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::safe::{Comm, Id};
use remat_core::{CollectiveKind, Error, Result};
use remat_dist::{Collective, Engine, Transport};
use std::sync::Arc;

/// The collectives of a multi-GPU job.
pub struct Nccl;

impl Nccl {
    /// Joins the NCCL job of `bootstrap`'s ranks (same rank, same world size) on GPU `device`.
    /// An error on every rank, naming what is missing, when rank 0 cannot make NCCL's id (no
    /// NCCL library) or this rank cannot open its device or communicator.
    pub fn init(bootstrap: &mut dyn Collective, device: usize) -> Result<Engine> {
        let (rank, size) = (bootstrap.rank(), bootstrap.world_size());
        let id = share_id(bootstrap)?;
        Engine::start("nccl", move || {
            let stream = open(device)?;
            let comm = Comm::from_rank(Arc::clone(&stream), rank, size, id)
                .map_err(|e| start_failed(format!("rank {rank}: ncclCommInitRank failed: {e:?}"), NcclStatus(e)))?;
            Ok(NcclTransport { comm, stream, rank, size, sent: 0 })
        })
    }
}

/// NCCL's unique id, made by rank 0 and broadcast over `bootstrap`: an error on every rank when
/// rank 0 could not make it (its own error there, one pointing to it elsewhere).
pub(crate) fn share_id(bootstrap: &mut dyn Collective) -> Result<Id> {
    let rank = bootstrap.rank();
    // Rank 0 sends a status byte and the id; the others learn from the byte that it failed.
    let mut message = vec![0u8; 129];
    let mut failure = None;
    if rank == 0 {
        match unique_id() {
            Ok(id) => {
                message[0] = 1;
                for (m, c) in message[1..].iter_mut().zip(id.internal()) {
                    *m = *c as u8;
                }
            }
            Err(e) => failure = Some(e),
        }
    }
    let message = bootstrap.broadcast(message, 0)?;
    if let Some(e) = failure {
        return Err(e);
    }
    if message[0] != 1 {
        return Err(Error::collective(
            CollectiveKind::Start,
            format!("rank {rank}: rank 0 could not start NCCL (see its error)"),
        ));
    }
    let mut internal = [0 as std::ffi::c_char; 128];
    for (c, m) in internal.iter_mut().zip(&message[1..]) {
        *c = *m as std::ffi::c_char;
    }
    Ok(Id::uninit(internal))
}

/// NCCL's library present and an id made (rank 0).
fn unique_id() -> Result<Id> {
    nccl_present()?;
    Id::new().map_err(|e| start_failed(format!("ncclGetUniqueId failed: {e:?}"), NcclStatus(e)))
}

/// `Ok` when `libnccl.so` can be loaded (cudarc would panic on a missing library).
pub(crate) fn nccl_present() -> Result<()> {
    // SAFETY: only dlopens candidate library names; no symbol is called.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(Error::collective(
            CollectiveKind::Start,
            "NCCL (libnccl.so.2) was not found; put its folder on LD_LIBRARY_PATH (`pip install nvidia-nccl-cu13` ships it)",
        ))
    }
}

/// GPU `device`'s default stream, after checking the driver and NCCL are there.
fn open(device: usize) -> Result<Arc<CudaStream>> {
    probe::driver().map_err(|message| Error::collective(CollectiveKind::Start, message))?;
    nccl_present()?;
    let ctx = CudaContext::new(device)
        .map_err(|e| start_failed(format!("GPU {device}: cannot create a context: {e:?}"), e))?;
    Ok(ctx.default_stream())
}

/// An [`Error::Collective`] of kind `Start`, keeping the driver's or NCCL's error as its source.
pub(crate) fn start_failed(message: String, source: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Collective { kind: CollectiveKind::Start, message, source: Some(Box::new(source)) }
}

/// NCCL's status as an error: cudarc's `NcclError` is not a `std::error::Error`, so it could not
/// be kept as a source. Both forms print what `NcclError`'s `Debug` prints, as messages did.
pub(crate) struct NcclStatus(pub(crate) cudarc::nccl::result::NcclError);

impl std::fmt::Debug for NcclStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::fmt::Display for NcclStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::error::Error for NcclStatus {}

struct NcclTransport {
    comm: Comm,
    stream: Arc<CudaStream>,
    rank: usize,
    size: usize,
    sent: u64,
}

impl NcclTransport {
    fn failed(&self, what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Collective {
            kind: CollectiveKind::Transport,
            message: format!("rank {}: NCCL {what} failed: {e:?}", self.rank),
            source: Some(Box::new(e)),
        }
    }

    /// Every rank's `values` of type `T`, gathered on the device and copied back.
    fn gather<T>(&mut self, values: &[T]) -> Result<Vec<T>>
    where
        T: cudarc::driver::DeviceRepr
            + cudarc::driver::ValidAsZeroBits
            + cudarc::nccl::safe::NcclType
            + Clone
            + Default,
    {
        if values.is_empty() {
            return Ok(Vec::new());
        }
        let send = self.stream.clone_htod(values).map_err(|e| self.failed("upload", e))?;
        let mut all =
            self.stream.alloc_zeros::<T>(values.len() * self.size).map_err(|e| self.failed("allocation", e))?;
        self.comm.all_gather(&send, &mut all).map_err(|e| self.failed("all-gather", NcclStatus(e)))?;
        let host = self.stream.clone_dtoh(&all).map_err(|e| self.failed("download", e))?;
        self.sent += (std::mem::size_of_val(values) * (self.size - 1)) as u64;
        Ok(host)
    }
}

impl Transport for NcclTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.size
    }

    fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>> {
        self.gather(bytes)
    }

    fn broadcast_bytes(&mut self, bytes: &mut [u8], root: usize) -> Result<()> {
        let all = self.gather(bytes)?;
        let n = bytes.len();
        bytes.copy_from_slice(&all[root * n..(root + 1) * n]);
        Ok(())
    }

    fn barrier(&mut self) -> Result<()> {
        self.gather(&[0u8]).map(|_| ())
    }

    fn bytes_sent(&self) -> u64 {
        self.sent
    }

    fn all_gather_f32(&mut self, values: &[f32]) -> Result<Vec<f32>> {
        self.gather(values)
    }
}
