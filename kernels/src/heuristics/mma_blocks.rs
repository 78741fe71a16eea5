//! Block sizes of the register-level mma kernels (forward and backward): the defaults measured
//! on the H200, and the `BURN_FLASH_MMA` / `BURN_FLASH_MMA_BWD` benchmarking overrides.
use crate::primitives::mma::TILE_M;

/// Blocks of the mma path: `planes` planes per cube of `plane_rows` query rows (16 or 32),
/// `block_kv` key/value rows per block (the backward's inner block), `buffers` (1 or 2)
/// shared-memory copies of the streamed block, and whether it streams by `cp.async` (two
/// buffers, devices with `copy_async`; the forward only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MmaBlocks {
    pub planes: u32,
    pub block_kv: u32,
    pub plane_rows: u32,
    pub buffers: u32,
    pub async_copy: bool,
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

/// Head dims (the wider of head_dim and val_dim) up to this take the small-head defaults of
/// both passes.
const SMALL_HEAD: u32 = 64;

/// The mma forward's blocks, unless
/// `BURN_FLASH_MMA=planes,block_kv[,plane_rows[,buffers[,async]]]` overrides them (a
/// benchmarking knob): `planes` planes of `plane_rows` query rows, `block_kv` keys per block,
/// `buffers` shared-memory copies of the key/value block, `async` 1 to stream it by `cp.async`. The defaults are the
/// fastest of one H200 tuning call (bf16, forward TFLOP/s, `benches/device/run.sh tune`,
/// benches/RESULTS.md 2026-11-30 fourth session) at the issues' two bar shapes, among 16- and
/// 32-row planes, 32 and 64 keys, 1 and 2 buffers, 4 to 16 planes:
/// - head_dim <= 64, not causal, at (64,12,1024,64): 4 x 64 keys, 32-row planes, 2 buffers:
///   155.1 (4 x 64 x 32 x 1: 151.4; the previous 8 x 64 x 16 x 1: 119.8);
/// - head_dim <= 64, causal: 8 x 32 keys, 16-row planes, 2 buffers: 96.2 (the others 88.6 to
///   95.2: causal is limited elsewhere);
/// - head_dim <= 128, at (16,16,2048,128): 4 x 32 keys, 32-row planes, 2 buffers: 180.6, causal
///   147.6 (8 x 64 x 16 x 1: 178.4 / 136.6; 32-row planes with 64 keys spill there).
/// 16 planes of 16 rows spilled at head_dim 128 (17 TFLOP/s).
pub(crate) fn forward(head_dim: u32, causal: bool) -> MmaBlocks {
    from_env("BURN_FLASH_MMA").unwrap_or(match (head_dim <= SMALL_HEAD, causal) {
        (true, false) => blocks(4, 64, 32, 2),
        (true, true) => blocks(8, 32, 16, 2),
        (false, _) => blocks(4, 32, 32, 2),
    })
}

/// The mma backward's blocks, unless `BURN_FLASH_MMA_BWD=planes,inner[,16[,buffers[,async]]]`
/// overrides them (a benchmarking knob): planes per cube (the outer, accumulated block is 16
/// rows per plane), rows of the inner (streamed) block, and its shared-memory buffers (1: each
/// inner block loaded between two cube syncs; 2: the next one fetched into registers while
/// this one computes and stored into the other buffer, one sync per block). The defaults are
/// the fastest of two H200 tuning calls (bf16, forward + backward TFLOP/s at the issues' bar
/// shapes, benches/RESULTS.md 2026-11-30 fourth session; runs of one config differ by up to
/// ~7% between calls):
/// - head_dim <= 64: 4 x 32, one buffer: 119.4 / 87.2 and 123.8 / 90.2 (non-causal / causal);
///   two buffers 119.5 / 79.7 and 118.7 / 85.1; 8 x 32 x 2: 108.5 / 79.1 and 113.1 / 82.9;
/// - head_dim <= 128: 8 x 32, two buffers: 137.6 / 105.9 and 143.1 / 115.6; 4 x 32 x 1: 126.1 /
///   105.4 and 130.9 / 112.9; 4 x 32 x 2: 135.4 / 110.9 and 138.5 / 113.3.
///
/// 64-row inner blocks were slower everywhere (4 x 64 x 2: 85.0 / 67.6 / 72.3 / 65.1).
/// The override takes 16-row planes only.
pub(crate) fn backward(head_dim: u32) -> MmaBlocks {
    from_env("BURN_FLASH_MMA_BWD")
        .filter(|blocks| blocks.plane_rows == TILE_M)
        .unwrap_or(if head_dim <= SMALL_HEAD {
            blocks(4, 32, TILE_M, 1)
        } else {
            blocks(8, 32, TILE_M, 2)
        })
}

/// A benchmarking override of an mma path's blocks:
/// `VAR=planes,rows[,plane_rows[,buffers[,async]]]` with 1..=16 planes, rows a positive
/// multiple of 16, plane_rows 16 (the default) or 32, buffers 1 (the default) or 2, async 0
/// (the default) or 1 (anything else is ignored; the forward streams by cp.async with two
/// buffers only).
fn from_env(var: &str) -> Option<MmaBlocks> {
    let value = std::env::var(var).ok()?;
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
    let valid = (1..=16).contains(&planes)
        && block_kv >= TILE_M
        && block_kv.is_multiple_of(TILE_M)
        && (plane_rows == TILE_M || plane_rows == 2 * TILE_M)
        && (buffers == 1 || buffers == 2)
        && (async_copy == 0 || async_copy == 1);
    valid.then_some(MmaBlocks {
        async_copy: async_copy == 1,
        ..blocks(planes, block_kv, plane_rows, buffers)
    })
}
