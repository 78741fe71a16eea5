//! Block sizes of the register-level mma kernels (forward and backward): the defaults measured
//! on an H200, how they shrink to smaller shared memories, and the text form of an explicit
//! override ([`crate::plan::Tuning`]; the benches and test binaries parse it from their flags).
use core::fmt;
use core::str::FromStr;

use super::Tuning;
use super::device::DeviceCaps;
use crate::config::MmaConfig;
use crate::error::FlashError;
use crate::primitives::mma::TILE_M;
use crate::problem::AttentionProblem;

/// Blocks of the mma path: `planes` planes per cube of `plane_rows` query rows (16 or 32),
/// `block_kv` key/value rows per block (the backward's inner block), `buffers` (1 or 2)
/// shared-memory copies of the streamed block, and whether it streams by `cp.async` (two
/// buffers, devices with `copy_async`; the forward only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MmaBlocks {
    pub planes: u32,
    pub block_kv: u32,
    pub plane_rows: u32,
    pub buffers: u32,
    pub async_copy: bool,
}

impl MmaBlocks {
    /// Checks what the mma kernels can take: 1..=16 planes, streamed rows a positive multiple
    /// of 16, planes of 16 or 32 rows, 1 or 2 buffers.
    pub fn validate(&self) -> Result<(), FlashError> {
        let valid = (1..=16).contains(&self.planes)
            && self.block_kv >= TILE_M
            && self.block_kv.is_multiple_of(TILE_M)
            && (self.plane_rows == TILE_M || self.plane_rows == 2 * TILE_M)
            && (self.buffers == 1 || self.buffers == 2);
        if valid {
            Ok(())
        } else {
            Err(FlashError::InvalidTuning(format!(
                "mma blocks {self}: planes 1..=16, rows a positive multiple of {TILE_M}, \
                 plane_rows {TILE_M} or {}, buffers 1 or 2",
                2 * TILE_M
            )))
        }
    }

    /// The mma forward's config for these blocks (`async_copy` only with two buffers on a
    /// device with `copy_async`), with [`Tuning`]'s settings of the kernel's code.
    pub(crate) fn forward_config(
        self,
        caps: &DeviceCaps,
        problem: &AttentionProblem,
        tuning: &Tuning,
    ) -> MmaConfig {
        MmaConfig {
            planes: self.planes,
            plane_rows: self.plane_rows,
            block_kv: self.block_kv,
            head_dim: problem.head_dim as u32,
            val_dim: problem.val_dim as u32,
            kv_buffers: self.buffers,
            async_kv: self.async_copy && self.buffers == 2 && caps.copy_async(),
            quiet_softmax: problem.quiet_softmax,
            score: problem.score_options(),
            // The forward keeps its (empty) masked pass even where `never_masked` holds: without
            // it the H200 ran the forward at 0.78-0.81x of the kernel with it at head dims 128
            // and 32 (0.99-1.06x at 64; bf16, not causal, commits 8de37d7 / d344576,
            // benches/RESULTS.md), while the gradient kernels gained 3-4 % from it.
            never_masked: false,
            rolled_steps: tuning.rolled_steps(),
            q_registers: tuning.forward_q_registers(),
            early_kv: tuning.forward_early_kv(),
            chunked_output: tuning.forward_chunked_output(),
        }
    }

    /// The next smaller blocks to try where these do not fit the device's shared memory: half
    /// the streamed rows (down to 32), then one buffer (which streams through registers), then
    /// 16-row planes (twice as many, the same query block); `None` below that.
    pub fn smaller(self) -> Option<MmaBlocks> {
        if self.block_kv > 2 * TILE_M {
            Some(MmaBlocks {
                block_kv: self.block_kv / 2,
                ..self
            })
        } else if self.buffers == 2 {
            Some(MmaBlocks {
                buffers: 1,
                async_copy: false,
                ..self
            })
        } else if self.plane_rows == 2 * TILE_M && self.planes <= 8 {
            Some(MmaBlocks {
                planes: 2 * self.planes,
                plane_rows: TILE_M,
                ..self
            })
        } else {
            None
        }
    }
}

const fn blocks(planes: u32, block_kv: u32, plane_rows: u32, buffers: u32) -> MmaBlocks {
    MmaBlocks {
        planes,
        block_kv,
        plane_rows,
        buffers,
        async_copy: false,
    }
}

/// The heads (the larger of head_dim and val_dim) whose causal forward streams 64 keys per
/// block ([`forward_default`]); other causal heads stream 32, and every head without causal 64.
const FORWARD_CAUSAL_64_KEYS: core::ops::RangeInclusive<usize> = 33..=64;

/// The mma forward's measured blocks for a head of `dim` (the larger of head_dim and val_dim):
/// 4 planes of 32 rows (128 queries per cube), 2 key/value buffers by cp.async, and 64 keys per
/// block, except causal outside [`FORWARD_CAUSAL_64_KEYS`], 32 keys.
///
/// Not causal: the fastest of one tuning run (H200, bf16, forward TFLOP/s, 2026-11-30, commit
/// a4ea89f, `benches/results/2026-11-30-h200-7173502/tune.csv`) at (64,12,1024,64) and
/// (16,16,2048,128): 190.9 and 246.5 (through registers, 4 x 64 x 32 x 2 at head_dim 64 and 4 x
/// 32 x 32 x 2 at 128: 151.1 / 197.5); again in the run of 2026-12-03 (the kernels of 3c0a43b,
/// bench of 877205e, `benches/results/2026-12-03-h200-877205e/tune-forward.csv`): 222.0 / 244.7
/// / 275.5 / 146.8 at (64,12,1024,64) / (16,16,2048,64) / (16,16,2048,128) / (32,12,1024,32),
/// against 157.4-195.5, 171.0-212.7, 126.2-260.3 and 114.8-147.3 for 4 x 32 x 32, 8 x 64 x 16,
/// 8 x 32 x 16, 4 x 128 x 32, 8 x 128 x 16 and 2 x 64 x 32 (two buffers each; 2 x 64 x 32 at
/// (32,12,1024,32): 147.3, level).
///
/// Causal, same run: at head dim 64, 64 keys ran at 154.7 and 194.8 at (64,12,1024,64) and
/// (16,16,2048,64) against 144.1 and 174.3 with 32 keys. At 128 the two are level (210.3 against
/// 213.8) and 32 keys compile to half the CUDA (765 against 1354 KiB, half the nvrtc time) without
/// the 256 bytes of spills of 64 keys (`scripts/cuda_offline_sass.sh`); at 32, 32 keys stay a
/// little ahead (96.1 against 94.5 at (32,12,1024,32), within the run's spread of about 2.5 %).
///
/// Through registers, 32-row planes spilled with 64 keys (the staged block costs 32 to 64
/// registers); 16 planes of 16 rows spilled at head_dim 128 (17 TFLOP/s). With cp.async the
/// unmasked head-dim-128 forward still spills (380 bytes), and every other shape measured was
/// slower.
pub fn forward_default(causal: bool, dim: usize) -> MmaBlocks {
    MmaBlocks {
        async_copy: true,
        ..if causal && !FORWARD_CAUSAL_64_KEYS.contains(&dim) {
            blocks(4, 32, 32, 2)
        } else {
            blocks(4, 64, 32, 2)
        }
    }
}

/// The widest head (the larger of head_dim and val_dim) the backward's narrow-head blocks are
/// for; wider heads take 8 planes x 64 inner rows ([`backward_default`]).
const BACKWARD_NARROW_HEAD: usize = 64;

/// The mma backward's measured blocks for a head of `dim` (the larger of head_dim and
/// val_dim): planes per cube (the outer, accumulated block is 16 rows per plane), rows of the
/// inner (streamed) block, its shared-memory buffers (2: the next inner block is copied by
/// `cp.async` while this one computes, which hides the copy the kernels otherwise wait for at
/// each block) and whether it streams by `cp.async`. The fastest of one tuning run (H200, bf16,
/// forward + backward TFLOP/s of the two gradient kernels with these blocks, 2026-12-02, the
/// kernels of commit 65310dc, `benches/results/2026-12-02-h200-65310dc/tune.csv`), not causal /
/// causal:
/// - dim > 64: 8 planes (128 keys) x 64 inner rows, two buffers: 231.6 / 200.1 at
///   (4,16,8192,128), against 195.9 / 180.8 for the earlier 4 x 32 x one buffer and 220.3 /
///   198.9 for 4 x 32 x two buffers;
/// - dim <= 64: 4 planes x 32 inner rows, two buffers: 179.4 / 137.1 at (16,16,2048,64) and
///   119.0 / 67.1 at (32,12,1024,32), against 170.1 / 133.5 and 98.7 / 72.6 with one buffer;
///   8 x 64 x two buffers: 169.9 / 125.9 and 110.8 / 66.8.
///
/// (Measured 2026-11-30 on the kernels of that day, two buffers and 64-row inner blocks were
/// not faster: `benches/results/2026-11-30-h200-7173502/tune.csv`; the gradient kernels have
/// streamed by `cp.async` since.)
pub fn backward_default(dim: usize) -> MmaBlocks {
    MmaBlocks {
        async_copy: true,
        ..if dim > BACKWARD_NARROW_HEAD {
            blocks(8, 64, TILE_M, 2)
        } else {
            blocks(4, 32, TILE_M, 2)
        }
    }
}

/// The one-pass backward's blocks (the dK/dV kernel that also adds dQ,
/// [`crate::backward::dq_sink`]) for every head: 8 planes (128 keys per cube) x 64 query rows
/// per inner block, two buffers by `cp.async`. Each cube adds its share of every dQ element
/// once, so the atomic requests to L2 fall with the keys per cube: 128 keys halve those of the
/// two-kernel dK/dV blocks at head dims up to 64 (4 planes, 64 keys), where the one pass with
/// those blocks held L2 at 81 % of its peak (Nsight Compute, H200, 2026-12-03, 2b9b810:
/// `benches/results/2026-12-03-h200-2b9b810/ncu-summary.csv`).
pub fn one_pass_default() -> MmaBlocks {
    MmaBlocks {
        async_copy: true,
        ..blocks(8, 64, TILE_M, 2)
    }
}

/// `planes,rows[,plane_rows[,buffers[,async]]]` with 1..=16 planes, rows a positive multiple
/// of 16, plane_rows 16 (the default) or 32, buffers 1 (the default) or 2, async 0 (the
/// default) or 1 (the forward streams by cp.async with two buffers only); `None` otherwise.
fn parse(value: &str) -> Option<MmaBlocks> {
    let fields: Vec<u32> = value
        .split(',')
        .map(|field| field.trim().parse().ok())
        .collect::<Option<_>>()?;
    let (planes, block_kv, plane_rows, buffers, async_copy) = match fields[..] {
        [planes, block_kv] => (planes, block_kv, TILE_M, 1, 0),
        [planes, block_kv, plane_rows] => (planes, block_kv, plane_rows, 1, 0),
        [planes, block_kv, plane_rows, buffers] => (planes, block_kv, plane_rows, buffers, 0),
        [planes, block_kv, plane_rows, buffers, async_copy] => {
            (planes, block_kv, plane_rows, buffers, async_copy)
        }
        _ => return None,
    };
    let blocks = MmaBlocks {
        async_copy: async_copy == 1,
        ..blocks(planes, block_kv, plane_rows, buffers)
    };
    (async_copy <= 1 && blocks.validate().is_ok()).then_some(blocks)
}

/// The text form `planes,rows[,plane_rows[,buffers[,async]]]` (see [`parse`]).
impl FromStr for MmaBlocks {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        parse(value).ok_or_else(|| {
            format!(
                "{value:?} is not planes,rows[,plane_rows[,buffers[,async]]] (planes 1..=16, rows a \
                 positive multiple of 16, plane_rows 16 or 32, buffers 1 or 2, async 0 or 1)"
            )
        })
    }
}

impl fmt::Display for MmaBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let MmaBlocks { planes, block_kv, plane_rows, buffers, async_copy } = *self;
        write!(f, "{planes},{block_kv},{plane_rows},{buffers},{}", u32::from(async_copy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_two_to_five_fields_with_their_defaults() {
        assert_eq!(parse("8,64"), Some(blocks(8, 64, 16, 1)));
        assert_eq!(parse("4, 64, 32"), Some(blocks(4, 64, 32, 1)));
        assert_eq!(parse("4,32,32,2"), Some(blocks(4, 32, 32, 2)));
        assert_eq!(
            parse("4,64,32,2,1"),
            Some(MmaBlocks {
                async_copy: true,
                ..blocks(4, 64, 32, 2)
            })
        );
        assert_eq!(parse("4,32,16,1,0"), Some(blocks(4, 32, 16, 1)));
    }

    #[test]
    fn the_causal_forward_streams_64_keys_only_at_head_dims_33_to_64() {
        for dim in [16, 32, 48, 64, 96, 128, 256] {
            assert_eq!(forward_default(false, dim).block_kv, 64, "not causal, dim {dim}");
            let causal_keys = if (33..=64).contains(&dim) { 64 } else { 32 };
            assert_eq!(forward_default(true, dim).block_kv, causal_keys, "causal, dim {dim}");
            assert_eq!(forward_default(true, dim).planes, 4);
            assert!(forward_default(true, dim).async_copy);
        }
    }

    #[test]
    fn smaller_blocks_shrink_the_stream_then_the_buffers_then_the_planes() {
        let async_blocks = MmaBlocks {
            async_copy: true,
            ..blocks(4, 64, 32, 2)
        };
        let mut chain = vec![async_blocks];
        while let Some(next) = chain.last().unwrap().smaller() {
            chain.push(next);
        }
        assert_eq!(
            chain,
            [
                async_blocks,
                MmaBlocks {
                    block_kv: 32,
                    ..async_blocks
                },
                blocks(4, 32, 32, 1),
                blocks(8, 32, 16, 1),
            ]
        );
    }

    #[test]
    fn rejects_what_the_kernels_cannot_take() {
        for value in [
            "default",
            "",
            "4",
            "0,64",
            "17,64",
            "4,0",
            "4,24",
            "4,64,8",
            "4,64,48",
            "4,64,16,3",
            "4,64,16,2,2",
            "4,64,16,2,1,0",
            "4,-64",
            "4,64,x",
        ] {
            assert_eq!(parse(value), None, "{value:?}");
        }
    }
}
