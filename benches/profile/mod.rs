//! `attention profile`: where the time of one call goes, kernel by kernel, from CubeCL's own
//! profiler. With `profiling.logger.level = "basic"` CubeCL waits for every kernel it launches,
//! records its device time under the kernel's name, and at each device sync writes a table of
//! the kernels since the previous one (name, total device time, launches, share). This mode
//! turns that on (before any client: CubeCL reads its configuration once), writes the tables to
//! a file, runs each pass of each shape `WARMUP` times and then `CALLS` times, and reads back
//! the measured calls' tables:
//!
//! ```text
//! impl,B,H,N,D,causal,pass,kernel,launches_per_call,ms_per_call,share
//! ```
//! `ms_per_call` is device time: each launch is waited for, so the calls take longer than in
//! `speed`, and the shares, not the sum, are what this mode is for. Flash rows only
//! (`--shape=B,H,N,D`, default the first anchor shape; causal and not).
use std::path::{Path, PathBuf};
use std::time::Duration;

use cubecl::config::profiling::ProfilingLogLevel;

use super::{Autodiff, Flash, Inner, WARMUP, check_route, forward, synced, train};

mod tables;
use tables::totals;

/// Measured calls per pass.
const CALLS: usize = 3;
/// CubeCL's logger writes from a thread of its own: time for it to reach the file.
const LOGGER_FLUSH: Duration = Duration::from_millis(500);

/// Turns CubeCL's per-kernel profiling on, its tables going to `log` (the rest of the
/// configuration as CubeCL would read it). Must run before any CubeCL client exists.
pub fn enable(log: &Path) {
    burn_flash_attn::configure_cubecl(|config| {
        config.profiling.logger.level = ProfilingLogLevel::Basic;
        config.profiling.logger.file = Some(log.to_path_buf());
        config.profiling.logger.append = false;
    })
    .expect("profile: CubeCL was configured before the profiler could be turned on");
}

/// Where the tables go: `$PROFILE_LOG`, else `target/attention-profile.log`.
pub fn log_path() -> PathBuf {
    std::env::var_os("PROFILE_LOG").map_or_else(|| PathBuf::from("target/attention-profile.log"), PathBuf::from)
}

pub fn profile(shapes: &[[usize; 4]], log: &Path) {
    println!("impl,B,H,N,D,causal,pass,kernel,launches_per_call,ms_per_call,share");
    for &shape in shapes {
        let [b, h, n, d] = shape;
        for causal in [false, true] {
            type Run = Box<dyn FnMut()>;
            let passes: [(&str, Run); 2] = [
                ("fwd", Box::new(forward::<Flash<Inner>>(shape, causal))),
                ("fwd+bwd", Box::new(train::<Flash<Autodiff<Inner>>>(shape, causal))),
            ];
            for (pass, mut run) in passes {
                (0..WARMUP).for_each(|_| synced(&mut run));
                std::thread::sleep(LOGGER_FLUSH);
                let start = std::fs::metadata(log).map_or(0, |m| m.len() as usize);
                (0..CALLS).for_each(|_| synced(&mut run));
                check_route("flash", shape);
                std::thread::sleep(LOGGER_FLUSH);
                let text = std::fs::read(log).unwrap_or_default();
                let measured = String::from_utf8_lossy(&text[start.min(text.len())..]).into_owned();
                let kernels = totals(&measured);
                let total: f64 = kernels.values().map(|k| k.seconds).sum();
                let mut rows: Vec<_> = kernels.into_iter().collect();
                rows.sort_by(|a, b| b.1.seconds.total_cmp(&a.1.seconds));
                for (kernel, k) in rows {
                    println!(
                        "flash,{b},{h},{n},{d},{causal},{pass},\"{kernel}\",{:.1},{:.4},{:.3}",
                        k.launches as f64 / CALLS as f64,
                        k.seconds * 1e3 / CALLS as f64,
                        k.seconds / total.max(f64::MIN_POSITIVE)
                    );
                }
            }
        }
    }
}
