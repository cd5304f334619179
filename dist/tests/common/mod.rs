//! An in-process transport for tests: the ranks of a job are threads meeting at a barrier.

use remat_core::Result;
use remat_dist::{Engine, Transport};
use std::sync::{Arc, Barrier, Mutex};

/// Where the ranks of one in-process job leave their bytes for each other.
pub struct Hub {
    slots: Mutex<Vec<Vec<u8>>>,
    barrier: Barrier,
}

pub struct InProcess {
    hub: Arc<Hub>,
    rank: usize,
    size: usize,
    sent: u64,
}

impl Transport for InProcess {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.size
    }
    fn all_gather_bytes(&mut self, bytes: &[u8]) -> Result<Vec<u8>> {
        self.hub.slots.lock().unwrap()[self.rank] = bytes.to_vec();
        self.hub.barrier.wait();
        let all = self.hub.slots.lock().unwrap().concat();
        self.hub.barrier.wait();
        self.sent += bytes.len() as u64;
        Ok(all)
    }
    fn broadcast_bytes(&mut self, bytes: &mut [u8], root: usize) -> Result<()> {
        let all = self.all_gather_bytes(bytes)?;
        bytes.copy_from_slice(&all[root * bytes.len()..][..bytes.len()]);
        Ok(())
    }
    fn barrier(&mut self) -> Result<()> {
        self.hub.barrier.wait();
        Ok(())
    }
    fn bytes_sent(&self) -> u64 {
        self.sent
    }
}

/// Runs `body(rank, engine)` on `size` in-process ranks; their results in rank order.
#[allow(dead_code)]
pub fn job<T: Send + 'static>(size: usize, body: fn(usize, &mut Engine) -> T) -> Vec<T> {
    let hub = Arc::new(Hub { slots: Mutex::new(vec![Vec::new(); size]), barrier: Barrier::new(size) });
    let ranks: Vec<_> = (0..size)
        .map(|rank| {
            let hub = Arc::clone(&hub);
            std::thread::spawn(move || {
                let mut engine = Engine::start("test", move || Ok(InProcess { hub, rank, size, sent: 0 })).unwrap();
                body(rank, &mut engine)
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

/// Runs `body(rank, engine)` on `size` in-process ranks, each owning its engine (for a
/// [`remat_dist::DataParallel`]); their results in rank order.
#[allow(dead_code)]
pub fn job_owning<T: Send + 'static>(size: usize, body: fn(usize, Engine) -> T) -> Vec<T> {
    let hub = Arc::new(Hub { slots: Mutex::new(vec![Vec::new(); size]), barrier: Barrier::new(size) });
    let ranks: Vec<_> = (0..size)
        .map(|rank| {
            let hub = Arc::clone(&hub);
            std::thread::spawn(move || {
                let engine = Engine::start("test", move || Ok(InProcess { hub, rank, size, sent: 0 })).unwrap();
                body(rank, engine)
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}
