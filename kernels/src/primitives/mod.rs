//! Small `#[cube]` pieces of the kernels, one concern each.
//!
//! - [`score`]: the logit transform (scale, softcap, mask, causal, bias) shared by forward and
//!   backward.
//! - [`arena`]: the f32 tiles of a portable kernel as views of one shared allocation, laid out
//!   the same in every run.
//! - [`dot`]: f32 dot products of shared-memory rows.
//! - [`mma`]: register-level 16x8x16 mma fragments, `ldmatrix` loads.
//! - [`chunk_io`]: 16-byte-chunk rows between global memory, registers and padded tiles.
//! - [`chunked_out`]: accumulator rows out through a plane's own tile rows in 16-byte chunks.
//! - [`online_softmax`]: running max / sum with the `alpha` rescale.
//! - [`block_stream`]: the one streaming loop of the mma kernels (prologue, steady state,
//!   masked and unmasked passes).
//! - [`pair_stream`]: the next key/value block into shared memory while one computes.
//! - [`block_range`]: which key/value blocks a query block visits (causal skipping, tails).
//! - [`precise_math`]: ~1 ulp f32 exp / ln where the device built-ins are looser.
//! - [`row_reduce`]: row max / sum across the units of a row, through shared memory.
//! - [`row_stream`]: the matrix kernels' streamed rows, the next block in registers while one
//!   computes.
//! - [`tile_io`]: strided global tiles to shared memory.
//! - [`tile_mma`]: one plane's 16x16x16 tile products, by cmma or a scalar stand-in.
pub mod arena;
pub mod block_range;
pub mod block_stream;
pub mod chunk_io;
pub mod chunked_out;
pub mod dot;
pub mod dropout;
pub mod mma;
pub mod online_softmax;
pub mod pair_stream;
pub mod precise_math;
pub mod row_reduce;
pub mod row_stream;
pub mod score;
pub mod tile_io;
pub mod tile_mma;
