//! The process-wide [`Tuning`] of every [`crate::Flash`] backend: explicit overrides of the
//! planner's choices (a forced forward path, mma blocks) for benchmarks and tuning runs. The
//! default, no override, is what the library picks from the device; nothing reads the
//! environment. A plan is made per `attention` call, so a change applies from the next call.
//!
//! ```rust
//! use burn_flash_attn::kernels::plan::{MmaBlocks, Tuning};
//!
//! let blocks: MmaBlocks = "4,64,32,2,1".parse().expect("planes,rows,plane_rows,buffers,async");
//! burn_flash_attn::set_tuning(Tuning::default().with_forward_mma(Some(blocks)));
//! assert_eq!(burn_flash_attn::tuning().forward_mma, Some(blocks));
//! burn_flash_attn::set_tuning(Tuning::default());
//! ```
use std::sync::RwLock;

pub use burn_flash_attn_kernels::Tuning;

static TUNING: RwLock<Tuning> = RwLock::new(Tuning {
    forward_path: None,
    forward_mma: None,
    backward_mma: None,
    backward_dq: None,
    backward_dq_width: None,
    backward_path: None,
    matrix_stand_in: false,
    matrix_f32_tiles: false,
    matrix_vector_loads: None,
    matrix_prefetch: None,
    matrix_staggered: None,
    matrix_plane_softmax: None,
    matrix_wide_scores: None,
    matrix_plane_rows: None,
    matrix_shared_stage: None,
    matrix_forward_planes: None,
    rolled_steps: None,
    async_copy: None,
    forward_q_registers: None,
    forward_early_kv: None,
    forward_chunked_output: None,
    backward_chunked_output: None,
});

/// Sets the tuning every later plan is made with. An override the kernels cannot take makes
/// those plans fail, and attention falls back to Burn's path with that reason (logged).
pub fn set_tuning(tuning: Tuning) {
    // A poisoned lock only means a panic elsewhere while it was held: the value is still a Tuning.
    *TUNING.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = tuning;
}

/// The tuning plans are made with now.
pub fn tuning() -> Tuning {
    *TUNING.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}
