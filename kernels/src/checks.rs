//! Host-side checks shared by the forward and backward launchers: the tensors against the
//! problem, the plan against the problem and the client, and the stand-ins bound for absent
//! optional tensors. The kernels trust what passes here.
use cubecl::prelude::*;

use crate::error::FlashError;
use crate::plan::Layout;
use crate::plan::device::{DeviceCaps, atomic_f32_add_of, cube_fits};
use crate::primitives::score::ScoreOptions;
use crate::problem::{AttentionProblem, FloatKind};

/// A tensor's name, its binding (`None` for an absent optional tensor) and the shape the
/// problem implies.
pub(crate) type ExpectedShape<'a, R> = (&'static str, Option<&'a TensorBinding<R>>, Vec<usize>);

/// The shapes every attention tensor must have.
pub(crate) struct Shapes {
    pub q: Vec<usize>,
    pub k: Vec<usize>,
    pub v: Vec<usize>,
    pub o: Vec<usize>,
    pub scores: Vec<usize>,
    pub rows: Vec<usize>,
    pub slopes: Vec<usize>,
}

impl Shapes {
    pub(crate) fn of(p: &AttentionProblem) -> Shapes {
        let (b, h, kv) = (p.batch, p.num_heads, p.num_kv_heads);
        Shapes {
            q: vec![b, h, p.seq_q, p.head_dim],
            k: vec![b, kv, p.seq_kv, p.head_dim],
            v: vec![b, kv, p.seq_kv, p.val_dim],
            o: vec![b, h, p.seq_q, p.val_dim],
            scores: vec![b, h, p.seq_q, p.seq_kv],
            rows: vec![b, h, p.seq_q],
            slopes: vec![h],
        }
    }
}

/// Checks every tensor's shape and rank against the problem, and that the optional mask and
/// bias are present exactly when the problem says so.
pub(crate) fn check_shapes<R: Runtime>(
    problem: &AttentionProblem,
    expected: &[ExpectedShape<'_, R>],
    mask: bool,
    bias: bool,
) -> Result<(), FlashError> {
    for (what, binding, shape) in expected {
        let Some(binding) = binding else { continue };
        if binding.shape.as_ref() != shape.as_slice() || binding.strides.len() != shape.len() {
            return Err(FlashError::ShapeMismatch {
                what,
                detail: format!(
                    "expected shape {shape:?}, got {:?} with {} strides",
                    binding.shape.as_ref(),
                    binding.strides.len()
                ),
            });
        }
    }
    let slopes = expected
        .iter()
        .any(|(what, binding, _)| *what == "alibi slopes" && binding.is_some());
    if mask != problem.mask.is_some() || bias != problem.has_bias || slopes != problem.alibi {
        return Err(FlashError::ShapeMismatch {
            what: "optional tensors",
            detail: format!(
                "problem says mask {:?}, bias {}, alibi {}; got mask {mask}, bias {bias}, alibi {slopes}",
                problem.mask, problem.has_bias, problem.alibi
            ),
        });
    }
    Ok(())
}

/// Checks that a cube of a plan fits the client's device, and that inputs a plan loads in
/// chunks are laid out for it.
pub(crate) fn check_plan_fits<R: Runtime>(
    client: &ComputeClient<R>,
    shared_memory: usize,
    units: u32,
    needs_chunked_rows: bool,
    layout: Layout,
) -> Result<(), FlashError> {
    // The raw properties: only sizes are read, which `DeviceCaps` passes through unchanged (and
    // building one copies the properties on HIP, at every launch).
    let hardware = &client.properties().hardware;
    if !cube_fits(hardware, shared_memory, units) {
        return Err(FlashError::Device(format!(
            "the plan needs {shared_memory} bytes of shared memory and {units} units per cube; \
             the device has {} and {}",
            hardware.max_shared_memory_size, hardware.max_units_per_cube
        )));
    }
    if needs_chunked_rows && !layout.rows_chunked {
        return Err(FlashError::Device(
            "the plan's mma kernels need q, k, v (and d_out) rows in contiguous 16-byte chunks"
                .into(),
        ));
    }
    Ok(())
}

/// Checks that the client's device can run a matrix plan, forward or gradient (`stand_in` plans
/// run anywhere, and are not checked): cmma registered for the tiles' type `dtype` (f32 for
/// f32 tiles), and planes a whole number of the device's planes (a cmma tile is a plane-wide
/// operation). A plan made for another device gets a typed error here.
pub(crate) fn check_cmma<R: Runtime>(
    client: &ComputeClient<R>,
    dtype: FloatKind,
    plane_size: u32,
) -> Result<(), FlashError> {
    let caps = DeviceCaps::of(client);
    if !caps.has_matrix_units(dtype) {
        return Err(FlashError::Device(format!(
            "the plan's matrix kernels need 16x16x16 {dtype:?} cmma, which the device does not register"
        )));
    }
    if !plane_size.is_multiple_of(caps.plane_size()) {
        return Err(FlashError::Device(format!(
            "the plan's matrix kernels have planes of {plane_size} units, not a whole number of the device's {}",
            caps.plane_size()
        )));
    }
    Ok(())
}

/// Checks that the client's device has the atomic adds a one-pass backward plan uses: f32 add
/// of `width` elements per request (1 on the portable path). A plan made for another device
/// gets a typed error here instead of a kernel the device cannot compile.
pub(crate) fn check_atomics<R: Runtime>(client: &ComputeClient<R>, width: u32) -> Result<(), FlashError> {
    if atomic_f32_add_of(client.properties(), width) {
        Ok(())
    } else {
        Err(FlashError::Device(format!(
            "the plan adds dQ with atomic adds of {width} f32 per request, which the device does not register"
        )))
    }
}

/// The optional tensors of the logit transform, bound in kernel order.
pub(crate) struct OptionalArgs<R: Runtime> {
    pub mask: TensorArg<R>,
    pub bias: TensorArg<R>,
    pub slopes: TensorArg<R>,
}

/// Binds the optional mask, bias and ALiBi slopes: without a mask a 1-element u32 stand-in
/// (rank 4), without slopes a 1-element f32 one (rank 1), without a bias q again (same element
/// type). The kernels never read a stand-in (`has_mask` / `has_bias` / `alibi` are comptime
/// false).
pub(crate) fn optional_args<R: Runtime>(
    client: &ComputeClient<R>,
    mask: Option<TensorBinding<R>>,
    bias: Option<TensorBinding<R>>,
    slopes: Option<TensorBinding<R>>,
    q: &TensorBinding<R>,
) -> OptionalArgs<R> {
    OptionalArgs {
        mask: mask.map_or_else(
            || stand_in(client, u32::as_bytes(&[0u32]), 4),
            TensorBinding::into_tensor_arg,
        ),
        bias: bias.unwrap_or_else(|| q.clone()).into_tensor_arg(),
        slopes: slopes.map_or_else(
            || stand_in(client, f32::as_bytes(&[0.0f32]), 1),
            TensorBinding::into_tensor_arg,
        ),
    }
}

/// A 1-element tensor of rank `rank` holding `bytes`: what a kernel binds for an argument the
/// launch does not have (its comptime config never reads it).
pub(crate) fn stand_in<R: Runtime>(client: &ComputeClient<R>, bytes: &[u8], rank: usize) -> TensorArg<R> {
    let handle = client.create_from_slice(bytes);
    // SAFETY: a 1-element tensor with 1 element of storage.
    unsafe { TensorArg::from_raw_parts(handle, vec![0; rank].into(), vec![1; rank].into()) }
}

/// Checks that a kernel configuration was planned for this problem: the dtype it was planned
/// for, the exact dims, the comptime logit options it compiles in and its softmax (`quiet`:
/// quiet or not; the gradient kernels are the same for both and pass the problem's).
pub(crate) fn check_plan_for(
    problem: &AttentionProblem,
    dtype: FloatKind,
    dims: (u32, u32),
    score: ScoreOptions,
    quiet: bool,
    plan: &dyn core::fmt::Display,
) -> Result<(), FlashError> {
    let for_problem = dtype == problem.dtype
        && dims == (problem.head_dim as u32, problem.val_dim as u32)
        && score == problem.score_options()
        && quiet == problem.quiet_softmax;
    if for_problem {
        Ok(())
    } else {
        Err(FlashError::Device(format!(
            "the plan ({plan}) is not for {problem:?}"
        )))
    }
}
