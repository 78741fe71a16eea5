//! The defaults the planner takes where a [`Tuning`] has no override, each with the measurement
//! it came from.
#[cfg(doc)]
use super::Tuning;

/// The mma kernels' default for [`Tuning::rolled_steps`]: unrolled in the source. Measured on
/// the H200 (bf16, 2026-12-04, 44735d5, `benches/results/2026-12-04-h200-44735d5/`): rolled,
/// forward and forward + backward run within 1.5 % of unrolled at head dims 32 and 64 but 1.6-3.4 %
/// slower at 128 (nvrtc spills more there), and the first calls (compilation included) of a
/// head-dim-128 configuration take 6.4 + 4.8 s instead of 13.0 + 6.5 s (not causal; causal
/// 5.4 + 9.0 against 5.7 + 10.3; no gain at 64). A training run compiles once and runs for
/// hours: the speed wins; `rolled_steps = Some(true)` is there for short runs and tests.
pub const ROLLED_STEPS: bool = false;

/// The mma forward's default for [`Tuning::forward_q_registers`]: Q's fragments stay in
/// registers where they fit (at most [`crate::config::MmaConfig::mma_q_in_registers`]'s 64
/// registers per lane). Re-read from shared memory, 128-key blocks (which spill 244 bytes) ran
/// the forward at 238-276 TFLOP/s not causal and 146-238 causal at head dim 64, against the
/// default's 243-280 and 169-255 in the same call (H100, bf16, benches/RESULTS.md, 2026-12-07;
/// the default blocks with Q re-read, in another call: 217-252 and 171-251).
pub const FORWARD_Q_REGISTERS: bool = true;

/// The mma forward's default for [`Tuning::forward_early_kv`]: off. Nsight Compute (H100,
/// (64,12,1024,64) bf16, benches/RESULTS.md, 2026-12-07) found the query block's loads and then
/// the first key/value block's wait, one after the other, among the long-scoreboard stalls of
/// the code a warp runs once (that wait alone 6.9 % of the causal forward's samples); started
/// early, the forward ran 0.98-1.01x as fast at four shapes of issue 15 (two process pairs, same
/// card): the other cube on the SM hides that wait already. Kept as an option for devices with
/// one cube per SM.
pub const FORWARD_EARLY_KV: bool = false;

/// The mma forward's default for [`Tuning::forward_chunked_output`]: on. Nsight Compute (H100,
/// (64,12,1024,64) bf16, benches/RESULTS.md, 2026-12-07) put 13.8 % of the forward's stall
/// samples (17.2 % causal) in the code after the key/value loop: each lane's 2-byte stores of O,
/// their addresses waiting on the tensor's strides, read per element. Chunked, on an H200 (bf16,
/// two process pairs, binaries of eab2650, benches/RESULTS.md 2026-12-07) the forward ran
/// 1.00-1.14x as fast causal and 1.00-1.07x not causal at issue 15's shapes, except (32,12,1024,32)
/// 0.96 / 1.03 in the two pairs, (4,16,8192,128) 0.99 / 1.00 and (1,16,32768,128) 0.98 / 0.98
/// (the host-bound (6,12,512,32) within noise); the forward suite's 78 half-precision cases
/// passed with it on the same card.
pub const FORWARD_CHUNKED_OUTPUT: bool = true;

/// The mma gradient kernels' default for [`Tuning::backward_chunked_output`]: off until its
/// whole suite has run on a GPU. The forward's element-wise stores of O took 13.8 % of its stall
/// samples on an H100 (above); the gradient kernels' stores of dK, dV and dQ are the same kind,
/// after longer loops. Offline (sm_90a, bf16, benches/RESULTS.md 2026-12-07) chunked, the
/// two-kernel dK/dV kernel at head dim 64 takes 128 registers and a 20-byte spill in its loop
/// instead of 161 and none. On an H100 (bf16, binaries of dedce7f, two process pairs,
/// benches/RESULTS.md 2026-12-07) it ran forward + backward 1.08-1.10x as fast at (64,12,1024,64),
/// 1.03-1.06x at (16,16,2048,64) and (16,16,2048,128), 1.00-1.04x at the other shapes of issue
/// 15 (0.99 once at (1,16,32768,128); the host-bound (6,12,512,32) aside). Its suites on H100s
/// (2026-12-07 and 2026-12-08, benches/RESULTS.md): no test failed, but the one pass's two rule
/// tests and the bf16 reruns never finished within a call, and the one pass is the default
/// from 2048 keys.
pub const BACKWARD_CHUNKED_OUTPUT: bool = false;

/// Whether the matrix kernels read their inputs in 16-byte vectors where they can
/// ([`Tuning::matrix_vector_loads`]). On: on an H100 (bf16, cmma, benches/RESULTS.md,
/// 2026-12-06) it ran the matrix forward 1.6-2.2x and forward + backward 1.4-1.7x faster than
/// element-wise staging, the whole forward suite passing on it.
pub const MATRIX_VECTOR_LOADS: bool = true;

/// Whether the matrix kernels fetch their streamed block one block ahead where the registers
/// allow ([`Tuning::matrix_prefetch`]). Off: on an H100 (bf16, cmma, benches/RESULTS.md,
/// 2026-12-06, adf5877) fetching ahead ran the matrix forward 0.85-0.88x as fast at head dim
/// 64 (0.98-1.00x at 32 and 128) and forward + backward 0.96-0.97x (0.97-1.00x elsewhere).
/// With 16-byte staging the kernels wait on shared memory (Nsight Compute: the L1 / shared
/// pipe 80 % busy in the forward), not on global loads, and the held block costs registers
/// (below). Kept as an option for devices where global latency binds.
pub const MATRIX_PREFETCH: bool = false;

/// Whether the matrix forward staggers rows 8-15's column walk ([`Tuning::matrix_staggered`]).
/// Nsight Compute on an H100 (benches/RESULTS.md, 2026-12-06) found the matrix forward bound by
/// its shared-memory pipe, with 2-way bank conflicts where, by the tiles' layout (rows padded by
/// 16 bytes), S's reads and P's stores of rows r and r + 8 meet in one bank; staggered, they
/// fall in different banks. On: on an H100 (bf16, cmma, softmax in the plane, a2d4d63) it ran
/// the matrix forward 1.01-1.05x as fast at four of the bar's shapes (forward + backward
/// 1.00-1.01x), the forward suite passing on it (163 / 163).
pub const MATRIX_STAGGERED: bool = true;

/// Whether the matrix forward keeps its softmax inside each plane where the device allows
/// ([`Tuning::matrix_plane_softmax`]). A plane's 16 query rows are its own: its S, P and O
/// never leave it, only K and V are shared by the cube. Through shared memory, each key/value
/// block synchronizes the whole cube five times (K / V stored, S stored, the rows' maxima,
/// their sums, the block done); with plane shuffles the maxima and sums need none, and where
/// the plane can synchronize alone (CUDA's `__syncwarp`; HIP has no plane sync in CubeCL 0.10)
/// S and P are handed over within the plane and the rescale of O is the plane's own vote, two
/// cube syncs a block. The gradient kernels hand their strips over within the plane on the
/// same knob where the plane can synchronize alone. On: on an H100 (bf16, cmma, a2d4d63) it
/// ran the matrix forward 1.00-1.05x as fast at four of the bar's shapes (forward + backward
/// 0.99-1.02x: the gradient kernels' two syncs fewer do not show), the forward suite (163 / 163)
/// and the backward suite's f16 / bf16 tests (17 / 17) passing on it. With the stagger, an
/// offline sm_90a compile (nvrtc / ptxas 12.9) spills 4 bytes of the bf16 forward at head dim 64
/// (128 registers, the cap, either way); the H100's own compile of it spilled nothing. No device
/// without cmma takes it: the stand-in keeps shared memory, since lavapipe has no plane
/// operations.
pub const MATRIX_PLANE_SOFTMAX: bool = true;

/// Whether the matrix forward's f32 score tile has 32-byte row padding, its rows staggered in
/// four groups of four ([`Tuning::matrix_wide_scores`]). Nsight Compute on an H100
/// (benches/RESULTS.md, 2026-12-06) put 97 % of the forward's excess shared wavefronts in the
/// stores of S's f32 accumulator fragments: a half-warp stores four rows of eight floats, and
/// with 16-byte padding row r starts 4r banks on, so neighbouring rows overlap; with 32 bytes
/// they do not, but rows r and r + 4 then meet in the units' reads of S unless each group of
/// four rows walks its columns one step later than the one before. On the H200 (2026-12-07,
/// two runs at the six shapes of issue 15's bar) the forward ran 1.01-1.09x as fast with it,
/// its excess shared wavefronts 10 % -> 1 % of all. The 32 bytes count in the fit, and never
/// at the price of a block (the narrow padding is tried before a smaller block).
pub const MATRIX_WIDE_SCORES: bool = true;

/// The same for the gradient kernels' S and dP ([`Tuning::matrix_wide_scores`]): their stores
/// conflicted as the forward's (43 % of the dK/dV kernel's excess on the H100); the units read
/// a 16-column strip two rows at a time, which the wide rows put 8 banks apart, so rows are
/// taken in pairs two apart (16 banks), which also clears their 2-byte P / dS stores (28 %).
/// On the H200 (2026-12-07) that cut the dK/dV kernel's excess shared wavefronts from 20 % to
/// 4 % of all but not its time (10.43 -> 10.52 ms at (16,16,2048,64), 4 % more instructions,
/// issue-bound at 12 % occupancy): the backward alone ran 0.99-1.02x as fast. Off.
pub const MATRIX_GRADIENT_WIDE_SCORES: bool = false;

/// Query rows per plane of the matrix forward ([`Tuning::matrix_plane_rows`]): 16. With 32 a
/// plane loads each K and V fragment once for two row tiles (2 + n fragment loads instead of
/// 2 + 2n per step for n output tiles a row; offline sm_90a, bf16 head dim 64: 15.7 instead of
/// 21.7 instructions per HMMA) but takes 255 registers instead of 128 and, in four planes of 32,
/// 124 KiB of shared memory: on an H100 (bf16, benches/RESULTS.md 2026-12-07, fa3fb0b) the
/// matrix forward ran 0.65-0.80x as fast at head dim 64, 0.96-1.05x at 128, 0.84-0.96x at 32
/// (two planes of 32, which spill: 0.41-0.84x).
pub const MATRIX_PLANE_ROWS: u32 = 16;

/// Whether the matrix forward's S tile and O's staging tile share one allocation
/// ([`Tuning::matrix_shared_stage`]). It lowers what a cube declares (f16, `matrix_tuning`): at
/// head dim 64 on an H200 71 -> 54 KiB with four planes of 16 rows (by shared memory three cubes
/// an SM -> four) and 124 -> 90 KiB with four planes of 32 (one -> two); in an MI300X's 64 KiB
/// it buys 64 keys a block instead of 32 at head dims 64 and 96, never a second cube. On an H100
/// (bf16, benches/RESULTS.md 2026-12-08, 18023fd) the matrix forward ran 1.06-1.09x as fast with
/// it at head dim 64 (1.41-1.48x at 32 rows a plane), 0.95-1.00x at 128 and 0.97-0.99x at 32
/// (16 rows; two cubes an SM at 128 and four at 32 either way): it pays where it adds a cube,
/// which the planner cannot tell without an SM's shared memory. Off: the forward suite has not
/// run with it on a GPU.
pub const MATRIX_SHARED_STAGE: bool = false;

/// The values [`Tuning::matrix_plane_rows`] takes.
pub const MATRIX_PLANE_ROWS_TAKEN: [u32; 2] = [16, 32];

/// The most 32-bit registers per unit the matrix kernels spend on the block fetched ahead:
/// (forward, gradient kernels). Offline (sm_90a, the `matrix_codegen` sources, 2026-12-06),
/// without -> with the block ahead: the f16 forward at head dim 64 takes 128 -> 168 registers
/// (and a 12-byte spill), the bf16 forward at 128 255 either way, the dK/dV kernel at 64
/// 185 -> 255 (a 12-byte spill), dQ's at 64 96 -> 128; the dK/dV kernel at 128 takes 255
/// without it, so it gets none. On gfx942 three variants spill with it (docs/HIP.md).
pub const MATRIX_PREFETCH_REGISTERS: (u32, u32) = (64, 32);

/// The one-pass backward's f32 per dQ atomic request, widest first
/// ([`Tuning::backward_dq_width`], [`crate::backward::dq_sink`]).
pub const DQ_WIDTHS: [u32; 3] = [4, 2, 1];
