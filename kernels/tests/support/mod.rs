//! The one support tree of the kernel tests. Every test binary includes it the same way:
//! `#[path = "../support/mod.rs"] mod support;` from a suite in a subdirectory, `mod support;`
//! from a top-level test file.
//!
//! - [`runtime`]: the test runtime (cargo feature `cuda` > `hip` > wgpu), its client, simulated
//!   devices (H200, MI300X) for the planner;
//! - [`device`]: device tensors in any [`Layout`], uploads of f64 data as any element type,
//!   poisoned outputs, read-back as f64 in logical row-major order;
//! - [`inputs`]: the seed policy (a seed derived from the test or case name, `FLASH_TEST_SEED`
//!   overrides it) and seeded random values and masks;
//! - [`compare`]: the f64 oracle comparison under the FlashAttention tolerance rule;
//! - [`case`]: the attention case (shape, options, layout);
//! - [`backward_run`]: a case's seeded data, device tensors and backward run against the oracle;
//! - [`forward`]: the forward run of a [`Case`] through any launcher;
//! - [`planning`]: plans with the tests' tuning flags; [`cuda_codegen`]: device-free CUDA C++;
//!   [`mma_sources`]: that C++ for the mma kernels' configs; [`kernel_args`]: the compilation
//!   arguments those expansions (CUDA and HIP) bind.
// Each binary uses part of the tree.
#![allow(dead_code, unused_imports)]

pub mod backward_run;
pub mod case;
pub mod compare;
pub mod cuda_codegen;
pub mod device;
pub mod forward;
pub mod inputs;
pub mod kernel_args;
pub mod mma_sources;
pub mod planning;
pub mod runtime;

pub use backward_run::*;
pub use case::*;
pub use compare::*;
pub use device::*;
pub use inputs::*;
pub use runtime::*;
