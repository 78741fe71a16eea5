//! Conformance of `Flash<B>` as a Burn backend, on the runtime selected by cargo feature (WGPU by
//! default: Mesa lavapipe in CI). One test binary, so that the kernels Burn compiles for its own
//! ops (36-76 s each on lavapipe) are compiled once per process.
mod api_flash;
mod api_ops;
mod common;
mod forwarding;
mod layout;
mod profile_tables;
mod semantics;
mod training;
