//! Picks the forward path and block sizes from the problem and `client.properties()`, with the
//! reason for every choice (the Burn side logs it).
//!
//! Reference devices: lavapipe (32 KiB shared memory, no cmma, plane size 8), MI300X (64 KiB
//! LDS, wave64, cmma only with `hip-rocwmma` and only f16), H100/H200 (228 KiB, cmma for
//! f16/bf16, plane size 32).
use cubecl::ir::features::MmaConfig;
use cubecl::ir::{DeviceProperties, ElemType, FloatKind as IrFloatKind, StorageType};

use crate::config::{FlashConfig, ForwardPath, MATRIX_TILE, MMA_CHUNK};
use crate::error::FlashError;
use crate::primitives::dot::DotSum;
use crate::primitives::mma::{LANES, TILE_M, TILE_N};
use crate::problem::{AttentionProblem, FloatKind, MaskKind};

pub(crate) mod mma_blocks;

/// Fewest units sharing one query row on the portable path: enough to split a row's S and O
/// columns, few enough that the per-row reductions through shared memory stay short.
const PORTABLE_MIN_UNITS_PER_ROW: u32 = 4;
/// O accumulators one unit keeps in registers on the portable path, preferred and at most;
/// wider val_dims get more units per row. At 32, f16 variants with head_dim 128 spilled 2-8
/// VGPRs on gfx942 (docs/HIP.md, known gap 2), so 16 is preferred; 32 is kept where 16 leaves
/// no block that fits the shared memory (more units per row need wider key blocks: head_dim
/// 256 in lavapipe's 32 KiB). Beyond 32, lavapipe's per-invocation stacks overflow (whole
/// cubes then write nothing).
const PORTABLE_OUT_COLS_PER_UNIT: [u32; 2] = [16, 32];
/// Block sizes tried, largest first: powers of two keep the cube a whole number of planes on
/// every device; 8 is the smallest that still fills a lavapipe plane with 4 units per row.
const BLOCK_CANDIDATES: [u32; 4] = [64, 32, 16, 8];
/// Query rows per plane on the matrix path: one cmma tile of rows.
const MATRIX_ROWS_PER_PLANE: u32 = MATRIX_TILE;
/// Planes per cube on the matrix path (block_q = 4 * 16 = 64, FA-2's choice for d <= 128).
const MATRIX_PLANES: u32 = 4;
/// Key/value block sizes tried on the matrix path, largest first (multiples of the tile).
const MATRIX_BLOCK_KV: [u32; 3] = [64, 32, 16];

/// The manual MMA shape of the mma path (m16n8k16, PTX fragment layout).
const MMA_SHAPE: (u32, u32, u32) = (TILE_M, TILE_N, TILE_M);
/// The plane size the PTX m16n8k16 fragment layout assumes.
const MMA_PLANE_SIZE: u32 = LANES;
/// Widest head_dim / val_dim tile the mma path keeps in registers (Q fragments, O
/// accumulators and the next block's K/V chunks must fit in 255 registers without spills).
const MMA_MAX_DIM: u32 = 128;
/// The chosen configuration and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardPlan {
    pub config: FlashConfig,
    /// One sentence per choice: the path, then the block sizes.
    pub reason: String,
}

/// The cubecl element type of a [`FloatKind`].
pub fn elem_type(dtype: FloatKind) -> ElemType {
    match dtype {
        FloatKind::F16 => ElemType::Float(IrFloatKind::F16),
        FloatKind::BF16 => ElemType::Float(IrFloatKind::BF16),
        FloatKind::F32 => ElemType::Float(IrFloatKind::F32),
    }
}

/// The cubecl element type of a [`MaskKind`].
pub fn mask_elem_type(kind: MaskKind) -> ElemType {
    match kind {
        MaskKind::U8 => ElemType::UInt(cubecl::ir::UIntKind::U8),
        MaskKind::U32 => ElemType::UInt(cubecl::ir::UIntKind::U32),
    }
}

/// Whether the device registers a 16x16x16 cmma with `dtype` inputs and f32 accumulation.
pub fn has_matrix_units(props: &DeviceProperties, dtype: FloatKind) -> bool {
    let elem: StorageType = elem_type(dtype).into();
    props.features.matmul.cmma.contains(&MmaConfig {
        a_type: elem,
        b_type: elem,
        cd_type: ElemType::Float(IrFloatKind::F32).into(),
        m: MATRIX_TILE,
        k: MATRIX_TILE,
        n: MATRIX_TILE,
    })
}

/// Whether the device registers the manual (register-level) 16x8x16 MMA with `dtype` inputs
/// and f32 accumulation, with the plane size of its PTX fragment layout.
pub fn has_register_mma(props: &DeviceProperties, dtype: FloatKind) -> bool {
    let elem: StorageType = elem_type(dtype).into();
    let (m, n, k) = MMA_SHAPE;
    props.hardware.plane_size_max == MMA_PLANE_SIZE
        && props.hardware.plane_size_min == MMA_PLANE_SIZE
        && props.features.matmul.mma.contains(&MmaConfig {
            a_type: elem,
            b_type: elem,
            cd_type: ElemType::Float(IrFloatKind::F32).into(),
            m,
            n,
            k,
        })
}

/// The properties the planners see on the runtime named `runtime` (`Runtime::name`). cubecl-hip
/// with `hip-rocwmma` registers bf16 16x16x16 cmma, but its bf16 fragments do not compile
/// (rocWMMA has no `PackTraits<__hip_bfloat16>`; docs/HIP.md): on HIP runtimes those configs are
/// dropped, so bf16 takes the portable path there. Other runtimes' properties pass through.
pub fn planning_properties<'a>(
    props: &'a DeviceProperties,
    runtime: &str,
) -> std::borrow::Cow<'a, DeviceProperties> {
    let bf16: StorageType = elem_type(FloatKind::BF16).into();
    let broken = |config: &MmaConfig| config.a_type == bf16 || config.b_type == bf16;
    if runtime.starts_with("hip") && props.features.matmul.cmma.iter().any(broken) {
        let mut usable = props.clone();
        usable.features.matmul.cmma.retain(|config| !broken(config));
        std::borrow::Cow::Owned(usable)
    } else {
        std::borrow::Cow::Borrowed(props)
    }
}

/// f32 outputs get the ~1 ulp exp / ln (WGSL's built-in exp may be off by 3 + 2|x| ulp) and,
/// where the device has f64, q·k summed in f64 (an f32 sum of head_dim products carries
/// several ulps): the FlashAttention rule holds f32 outputs to a few ulps of the exact result.
/// f16 / bf16 outputs round far above both errors.
fn precise_math(dtype: FloatKind) -> bool {
    dtype == FloatKind::F32
}

/// Checks that the device can hold the problem's element types at all.
fn check_types(props: &DeviceProperties, problem: &AttentionProblem) -> Result<(), FlashError> {
    if !props.supports_type(elem_type(problem.dtype)) {
        return Err(FlashError::Device(format!(
            "{:?} tensors are not supported",
            problem.dtype
        )));
    }
    if let Some(kind) = problem.mask
        && !props.supports_type(mask_elem_type(kind))
    {
        return Err(FlashError::Device(format!(
            "{kind:?} mask tensors are not supported"
        )));
    }
    Ok(())
}

/// Picks the path (matrix where the device has cmma for the dtype, portable otherwise, or
/// `forced`) and the largest block sizes that fit the device.
pub fn plan_forward(
    props: &DeviceProperties,
    problem: &AttentionProblem,
    forced: Option<ForwardPath>,
) -> Result<ForwardPlan, FlashError> {
    problem.validate()?;
    check_types(props, problem)?;
    let matrix = has_matrix_units(props, problem.dtype);
    let plane_size = props.hardware.plane_size_max;
    let (mut path, mut why) = match forced {
        Some(ForwardPath::Matrix) if !matrix => {
            return Err(FlashError::Device(format!(
                "the matrix path was forced but no 16x16x16 {:?} cmma is registered",
                problem.dtype
            )));
        }
        Some(path) => (path, "forced by the caller".to_string()),
        None if problem.dtype == FloatKind::F32 => (
            ForwardPath::Portable,
            "f32 inputs: cmma would round them to tf32".to_string(),
        ),
        None if has_register_mma(props, problem.dtype) && mma_fits_registers(problem) => (
            ForwardPath::Mma,
            format!("16x8x16 {:?} register mma is registered", problem.dtype),
        ),
        None if matrix => (
            ForwardPath::Matrix,
            format!("16x16x16 {:?} cmma is registered", problem.dtype),
        ),
        None => (
            ForwardPath::Portable,
            format!("no 16x16x16 {:?} cmma on this device", problem.dtype),
        ),
    };
    let config = match path {
        ForwardPath::Portable => portable_config(props, problem)?,
        ForwardPath::Mma => mma_config(props, problem)?,
        ForwardPath::Matrix => match (matrix_config(props, problem, plane_size), forced) {
            (Ok(config), _) => config,
            (Err(error), Some(_)) => return Err(error),
            // The matrix tiles need more shared memory (e.g. head_dim 256 in MI300's 64 KiB):
            // the portable path, whose f32 tiles are smaller, still runs the problem.
            (Err(error), None) => {
                why = format!("{why}, but the matrix path does not fit: {error}");
                path = ForwardPath::Portable;
                portable_config(props, problem)?
            }
        },
    };
    let max_units = props.hardware.max_units_per_cube;
    if config.units() > max_units {
        return Err(FlashError::Device(format!(
            "{} units per cube > the device's {max_units}",
            config.units()
        )));
    }
    let q_blocks = problem.seq_q.div_ceil(config.block_q as usize);
    let (max_x, max_y, _) = props.hardware.max_cube_count;
    if q_blocks > max_x as usize || problem.heads_total() > max_y as usize {
        return Err(FlashError::Device(format!(
            "grid ({q_blocks} query blocks, {} heads) exceeds the device's ({max_x}, {max_y})",
            problem.heads_total()
        )));
    }
    let numerics = match (config.precise_math, config.dot) {
        (true, DotSum::Wide) => "; f32 outputs: ~1 ulp exp/ln and q·k summed in f64",
        (true, DotSum::Compensated) => {
            "; f32 outputs: ~1 ulp exp/ln and q·k summed in compensated f32 (no f64 on this device)"
        }
        _ => "",
    };
    let blocks = match path {
        ForwardPath::Mma => format!(
            "{} planes of {} rows, block_q = {}, block_kv = {}, {} key/value buffer(s){}: the \
             measured defaults (or BURN_FLASH_MMA), smaller where those do not fit, {} of {} bytes \
             of shared memory",
            config.num_planes(),
            config.mma_row_tiles() * MATRIX_ROWS_PER_PLANE,
            config.block_q,
            config.block_kv,
            config.kv_buffers,
            if config.async_kv {
                " filled by cp.async"
            } else {
                ""
            },
            config.shared_memory_bytes(),
            props.hardware.max_shared_memory_size
        ),
        _ => format!(
            "block_q = {}, block_kv = {}: largest that fit {} of {} bytes of shared memory",
            config.block_q,
            config.block_kv,
            config.shared_memory_bytes(),
            props.hardware.max_shared_memory_size
        ),
    };
    let reason = format!("{} path ({why}); {blocks}{numerics}", path.name());
    Ok(ForwardPlan { config, reason })
}

/// Largest power of two >= `n`, at least the smallest candidate: blocks larger than the
/// sequence only waste units.
fn useful_block(n: usize) -> u32 {
    let smallest = BLOCK_CANDIDATES[BLOCK_CANDIDATES.len() - 1];
    (n.next_power_of_two() as u32).max(smallest)
}

/// Units per query row on the portable path: a power of two, at least
/// PORTABLE_MIN_UNITS_PER_ROW, enough that no unit holds more than `out_cols` O columns.
fn portable_units_per_row(val_dim: u32, out_cols: u32) -> u32 {
    val_dim
        .div_ceil(out_cols)
        .next_power_of_two()
        .max(PORTABLE_MIN_UNITS_PER_ROW)
}

fn portable_config(
    props: &DeviceProperties,
    problem: &AttentionProblem,
) -> Result<FlashConfig, FlashError> {
    let base = FlashConfig {
        path: ForwardPath::Portable,
        block_q: 0,
        block_kv: 0,
        head_dim: problem.head_dim as u32,
        val_dim: problem.val_dim as u32,
        units_per_row: 0,
        plane_size: props.hardware.plane_size_max,
        elem_bytes: problem.dtype.size() as u32,
        precise_math: precise_math(problem.dtype),
        kv_buffers: 1,
        async_kv: false,
        dot: match (
            precise_math(problem.dtype),
            props.supports_type(ElemType::Float(IrFloatKind::F64)),
        ) {
            (false, _) => DotSum::Plain,
            (true, true) => DotSum::Wide,
            (true, false) => DotSum::Compensated,
        },
        score: problem.score_options(),
    };
    let max_kv = useful_block(problem.seq_kv);
    for out_cols in PORTABLE_OUT_COLS_PER_UNIT {
        let lanes = portable_units_per_row(problem.val_dim as u32, out_cols);
        // At least one whole plane of units (a 32-unit cube would leave half a wave64 idle).
        let whole_plane = props.hardware.plane_size_max.div_ceil(lanes);
        let max_q = useful_block(problem.seq_q).max(whole_plane);
        for block_q in BLOCK_CANDIDATES.into_iter().filter(|&b| b <= max_q) {
            // Every unit of a row owns at least one S column: block_kv >= units_per_row.
            for block_kv in BLOCK_CANDIDATES
                .into_iter()
                .filter(|&b| b <= max_kv.max(lanes) && b >= lanes)
            {
                let config = FlashConfig {
                    block_q,
                    block_kv,
                    units_per_row: lanes,
                    ..base
                };
                if fits(props, &config) {
                    return Ok(config);
                }
            }
        }
    }
    Err(too_big(props, problem))
}

fn matrix_config(
    props: &DeviceProperties,
    problem: &AttentionProblem,
    plane_size: u32,
) -> Result<FlashConfig, FlashError> {
    if plane_size < MATRIX_TILE || !plane_size.is_multiple_of(MATRIX_TILE) {
        return Err(FlashError::Device(format!(
            "the matrix path needs a plane size that is a multiple of {MATRIX_TILE}, got {plane_size}"
        )));
    }
    let base = FlashConfig {
        path: ForwardPath::Matrix,
        block_q: MATRIX_PLANES * MATRIX_ROWS_PER_PLANE,
        block_kv: 0,
        head_dim: problem.head_dim as u32,
        val_dim: problem.val_dim as u32,
        units_per_row: plane_size / MATRIX_ROWS_PER_PLANE,
        plane_size,
        elem_bytes: problem.dtype.size() as u32,
        precise_math: precise_math(problem.dtype),
        kv_buffers: 1,
        async_kv: false,
        dot: DotSum::Plain,
        score: problem.score_options(),
    };
    for block_kv in MATRIX_BLOCK_KV {
        let config = FlashConfig { block_kv, ..base };
        if fits(props, &config) {
            return Ok(config);
        }
    }
    Err(too_big(props, problem))
}

/// Whether the mma path holds the problem's rows in registers and loads them in whole chunks.
pub(crate) fn mma_fits_registers(problem: &AttentionProblem) -> bool {
    let dims = [problem.head_dim as u32, problem.val_dim as u32];
    dims.iter()
        .all(|&d| d.is_multiple_of(MMA_CHUNK) && d.next_multiple_of(MATRIX_TILE) <= MMA_MAX_DIM)
}

fn mma_config(
    props: &DeviceProperties,
    problem: &AttentionProblem,
) -> Result<FlashConfig, FlashError> {
    if !has_register_mma(props, problem.dtype) || !mma_fits_registers(problem) {
        return Err(FlashError::Device(format!(
            "the mma path needs a 16x8x16 {:?} register mma, plane size {MMA_PLANE_SIZE}, and \
             head_dim / val_dim multiples of {MMA_CHUNK} up to {MMA_MAX_DIM} (got {} / {})",
            problem.dtype, problem.head_dim, problem.val_dim
        )));
    }
    // The defaults were measured on an H200 (227 KiB of shared memory); smaller devices (about
    // 100 KiB on consumer Ampere / Ada) take the largest smaller blocks that fit.
    let mut blocks = Some(mma_blocks::forward(problem.causal));
    while let Some(candidate) = blocks {
        let config = candidate.forward_config(props, problem);
        if fits(props, &config) {
            return Ok(config);
        }
        blocks = candidate.smaller();
    }
    Err(too_big(props, problem))
}

fn fits(props: &DeviceProperties, config: &FlashConfig) -> bool {
    config.shared_memory_bytes() <= props.hardware.max_shared_memory_size
        && config.units() <= props.hardware.max_units_per_cube
}

fn too_big(props: &DeviceProperties, problem: &AttentionProblem) -> FlashError {
    FlashError::Device(format!(
        "head_dim {} / val_dim {} do not fit in {} bytes of shared memory with the smallest blocks",
        problem.head_dim, problem.val_dim, props.hardware.max_shared_memory_size
    ))
}
