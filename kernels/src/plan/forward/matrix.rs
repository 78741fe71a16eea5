//! The matrix forward's blocks ([`MatrixConfig`]), for [`super::forward`].
use crate::config::{MATRIX_TILE, MatrixConfig};
use crate::error::FlashError;
use crate::problem::{AttentionProblem, FloatKind};

use super::super::device::DeviceCaps;
use super::super::{
    MATRIX_PLANE_ROWS, MATRIX_PLANES, MATRIX_SHARED_STAGE, MATRIX_WIDE_SCORES,
    STAND_IN_PLANE_SIZE, Tuning,
};
use super::{precise_math, too_big};

/// Key/value block sizes tried on the matrix path, largest first (multiples of the tile).
const MATRIX_BLOCK_KV: [u32; 3] = [64, 32, 16];

/// The matrix path's config: the most planes ([`MATRIX_PLANES`], or the count
/// [`Tuning::matrix_forward_planes`] asks for), then the largest key/value block, padded rows
/// first, whose tiles fit the device. Planes of 16 query rows, or of 32 where
/// [`Tuning::matrix_plane_rows`] asks and the plane has a unit per row (16 where no block of
/// 32-row planes fits).
pub(super) fn matrix_config(
    caps: &DeviceCaps,
    problem: &AttentionProblem,
    stand_in: bool,
    f32_tiles: bool,
    tuning: &Tuning,
) -> Result<MatrixConfig, FlashError> {
    let plane_size = if stand_in { STAND_IN_PLANE_SIZE } else { caps.plane_size() };
    let wide_scores = tuning.matrix_wide_scores.unwrap_or(MATRIX_WIDE_SCORES);
    let shared_stage = tuning.matrix_shared_stage.unwrap_or(MATRIX_SHARED_STAGE);
    if plane_size < MATRIX_TILE || !plane_size.is_multiple_of(MATRIX_TILE) {
        return Err(FlashError::Device(format!(
            "the matrix path needs a plane size that is a multiple of {MATRIX_TILE}, got {plane_size}"
        )));
    }
    // Row tiles a plane, the asked first: 32 rows a plane only where the plane has a unit per
    // row, and 16 where no block of 32-row planes fits.
    let plane_rows = tuning.matrix_plane_rows.unwrap_or(MATRIX_PLANE_ROWS);
    let row_tiles: &[u32] = if plane_size >= plane_rows && plane_rows > MATRIX_TILE {
        &[plane_rows / MATRIX_TILE, 1]
    } else {
        &[1]
    };
    let elem = if f32_tiles { FloatKind::F32 } else { problem.dtype };
    // At each block size: S's rows padded wide (where asked), padded, then unpadded (fewer
    // bank conflicts first). The wider rows cost shared memory, so they count in the fit, and
    // never at the price of a block: where they do not fit, the narrow padding is next.
    let paddings = [(true, true), (true, false), (false, false)];
    let asked_planes = tuning.matrix_forward_planes;
    let block_qs = row_tiles.iter().flat_map(|&tiles| {
        MATRIX_PLANES
            .into_iter()
            .filter(move |&planes| asked_planes.is_none_or(|asked| asked == planes))
            .map(move |planes| (tiles, planes * tiles * MATRIX_TILE))
    });
    block_qs
        .flat_map(|(tiles, block_q)| MATRIX_BLOCK_KV.map(|block_kv| (tiles, block_q, block_kv)))
        .flat_map(|(tiles, block_q, block_kv)| paddings.map(|pad| (tiles, block_q, block_kv, pad)))
        .filter(|&(_, _, _, (_, wide))| wide_scores || !wide)
        .map(|(row_tiles, block_q, block_kv, (padded, wide))| MatrixConfig {
            block_q,
            block_kv,
            head_dim: problem.head_dim as u32,
            val_dim: problem.val_dim as u32,
            plane_size,
            row_tiles,
            elem_bytes: elem.size() as u32,
            f32_tiles,
            stand_in,
            precise_math: precise_math(problem.dtype),
            quiet_softmax: problem.quiet_softmax,
            score: problem.score_options(),
            padded,
            vector_loads: false,
            prefetch: false,
            staggered: false,
            plane_shuffles: false,
            plane_sync: false,
            wide_scores: wide,
            shared_stage,
        })
        .find(|config| caps.fits(config.shared_memory_bytes(), config.units()))
        .ok_or_else(|| too_big(caps, problem))
}
