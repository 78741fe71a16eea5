//! Device memory as the CubeCL client sees it.
use cubecl::{Runtime, client::ComputeClient};

const BYTES_PER_MIB: f64 = 1024.0 * 1024.0;

/// Reads `bytes_reserved` of a CubeCL client: the memory its pools hold from the driver
/// (tensors in use, cached free pages and padding), not what the driver or other processes
/// use. Pools only grow between cleanups, so after a `memory_cleanup()` at the start of a run,
/// the largest value seen after each step is the run's peak footprint, rounded up to pages.
pub struct MemoryProbe<R: Runtime> {
    client: ComputeClient<R>,
    peak_bytes: u64,
}

impl<R: Runtime> MemoryProbe<R> {
    /// Frees the cached pages of `device`, then starts measuring.
    pub fn start(device: &R::Device) -> Self {
        let client = R::client(device);
        client.memory_cleanup();
        Self { client, peak_bytes: 0 }
    }
}

/// Where the training loop reads the peak memory after each step.
pub trait PeakMemory {
    /// The peak so far, in MiB, after sampling the current value.
    fn sample_mib(&mut self) -> f64;
}

impl<R: Runtime> PeakMemory for MemoryProbe<R> {
    fn sample_mib(&mut self) -> f64 {
        if let Ok(usage) = self.client.memory_usage() {
            self.peak_bytes = self.peak_bytes.max(usage.bytes_reserved);
        }
        self.peak_bytes as f64 / BYTES_PER_MIB
    }
}
