//! Device memory as the CubeCL client sees it.
use cubecl::{Runtime, client::ComputeClient, stream_id::StreamId};

const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;

/// Reads `bytes_reserved` of a CubeCL client: the memory its pools hold from the driver
/// (tensors in use, cached free pages and padding), not what the driver or other processes
/// use. Pools only grow between cleanups, so after a `memory_cleanup()` at the start of a run,
/// the largest value seen after each step is the run's peak footprint, rounded up to pages.
///
/// CubeCL keeps memory per stream, one stream per thread that issues work: the probe reads the
/// stream of the thread that started it (the training thread), from whichever thread samples
/// it (burn-train's Learner samples on its metrics thread).
pub struct MemoryProbe<R: Runtime> {
    client: ComputeClient<R>,
    stream: StreamId,
    peak_bytes: u64,
}

impl<R: Runtime> MemoryProbe<R> {
    /// Frees the cached pages of `device`, then starts measuring the calling thread's stream.
    pub fn start(device: &R::Device) -> Self {
        let client = R::client(device);
        client.memory_cleanup();
        Self { client, stream: StreamId::current(), peak_bytes: 0 }
    }
}

impl<R: Runtime> Clone for MemoryProbe<R> {
    fn clone(&self) -> Self {
        Self { client: self.client.clone(), stream: self.stream, peak_bytes: self.peak_bytes }
    }
}

/// Where the training loop reads the peak memory after each step.
pub trait PeakMemory {
    /// The peak so far, in MiB, after sampling the current value.
    fn sample_mib(&mut self) -> f64;
}

impl<R: Runtime> PeakMemory for MemoryProbe<R> {
    fn sample_mib(&mut self) -> f64 {
        if let Ok(usage) = self.stream.executes(|| self.client.memory_usage()) {
            self.peak_bytes = self.peak_bytes.max(usage.bytes_reserved);
        }
        self.peak_bytes as f64 / BYTES_PER_MIB
    }
}
