//! `burn_flash_attn::nn` against burn-nn 0.21, on the runtime selected by cargo feature (WGPU by
//! default: Mesa lavapipe in CI), f32: records load both ways, outputs meet the FlashAttention
//! rule against an f64 oracle of burn-nn's modules (burn-nn's own f32 output as the plain
//! implementation), on the plain backend and on `Flash` (where the attention takes the
//! kernels), caches equal the full computation, and a training step's gradients match; for
//! `MultiHeadAttention`, `TransformerEncoder`, `TransformerDecoder` and `CrossAttention`.
//!
//! The masks keep at least one key per row: there burn-nn's `min_float` fill and our exact
//! masking agree (`mha_fully_masked_row_attends_to_nothing` shows where they do not).
mod cross;
mod decoder;
mod encoder;
mod mha;
mod oracle;
mod support;
