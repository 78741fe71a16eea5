//! The ONE place that decides whether an `attention` call runs our kernels or Burn's
//! `attention_fallback`, and says why. Every decision is counted and its reason logged once.
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn_backend::{DType, TensorMetadata, ops::AttentionModuleOptions};
use burn_flash_attn_kernels::{AttentionProblem, FlashError, FloatKind, MaskKind, Passes, Plan};
use burn_std::BoolStore;

use crate::attention::Extension;

/// Where one `attention` call goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Our FlashAttention-2 kernels, as `plan` says (its `Display` names each kernel's path,
    /// blocks and why). The launches take this plan: what it says is what runs.
    Kernel { problem: AttentionProblem, plan: Box<Plan> },
    /// Burn's `attention_fallback` (materializes `[batch, heads, seq_q, seq_kv]`), with why.
    Fallback { reason: String },
}

impl Route {
    pub fn is_kernel(&self) -> bool {
        matches!(self, Route::Kernel { .. })
    }
}

impl core::fmt::Display for Route {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Route::Kernel { plan, .. } => write!(f, "flash kernels ({plan})"),
            Route::Fallback { reason } => write!(f, "attention_fallback ({reason})"),
        }
    }
}

/// What the router needs to know about one call, read from tensor metadata only (nothing is
/// read back from the device, and under Fusion nothing has run yet).
pub struct AttentionCall<'a, T, M> {
    pub query: &'a T,
    pub key: &'a T,
    pub value: &'a T,
    pub mask: Option<&'a M>,
    pub attn_bias: Option<&'a T>,
    pub options: &'a AttentionModuleOptions,
    /// What [`crate::flash_attention`] adds (`None` for a `module::attention` call).
    pub extension: Option<&'a Extension<T>>,
    /// The bias takes part in autodiff: dBias = dS is a full `[batch, heads, seq_q, seq_kv]`
    /// tensor, which a FlashAttention backward does not produce.
    pub bias_requires_grad: bool,
}

/// Decides kernel or fallback. `device_plan` plans `passes` of the problem on the device (see
/// [`burn_flash_attn_kernels::plan`]) without launching anything: training plans the backward
/// too, so a problem only the forward could run never starts on the kernels.
pub fn route<T: TensorMetadata, M: TensorMetadata>(
    call: &AttentionCall<'_, T, M>,
    passes: Passes,
    device_plan: impl FnOnce(&AttentionProblem, Passes) -> Result<Plan, FlashError>,
) -> Route {
    let route = if call.bias_requires_grad {
        Route::Fallback {
            reason: "attn_bias requires grad (dBias = dS is not produced by the flash backward)"
                .into(),
        }
    } else {
        match problem_of(call).and_then(|p| device_plan(&p, passes).map(|plan| (p, plan))) {
            Ok((problem, plan)) => Route::Kernel { problem, plan: Box::new(plan) },
            Err(err) => Route::Fallback { reason: err.to_string() },
        }
    };
    record(&route, call.extension.is_some());
    route
}

fn float_kind(dtype: DType) -> Result<FloatKind, FlashError> {
    match dtype {
        DType::F32 | DType::Flex32 => Ok(FloatKind::F32),
        DType::F16 => Ok(FloatKind::F16),
        DType::BF16 => Ok(FloatKind::BF16),
        other => Err(FlashError::UnsupportedDtype { dtype: format!("{other:?}") }),
    }
}

fn mask_kind(dtype: DType) -> Result<MaskKind, FlashError> {
    match dtype {
        DType::Bool(BoolStore::U8) => Ok(MaskKind::U8),
        DType::Bool(BoolStore::U32) => Ok(MaskKind::U32),
        other => Err(FlashError::UnsupportedDtype { dtype: format!("mask {other:?}") }),
    }
}

/// Builds the kernels' problem from the call, checking shapes and dtypes.
fn problem_of<T: TensorMetadata, M: TensorMetadata>(
    call: &AttentionCall<'_, T, M>,
) -> Result<AttentionProblem, FlashError> {
    let dtypes = [call.query.dtype(), call.key.dtype(), call.value.dtype()];
    if dtypes[1] != dtypes[0] || dtypes[2] != dtypes[0] {
        let [query, key, value] = dtypes.map(|d| format!("{d:?}"));
        return Err(FlashError::MixedDtypes { query, key, value });
    }
    let dtype = float_kind(dtypes[0])?;
    if let Some(bias) = call.attn_bias
        && float_kind(bias.dtype())? != dtype
    {
        return Err(FlashError::UnsupportedDtype {
            dtype: format!("attn_bias {:?} with query {:?}", bias.dtype(), dtypes[0]),
        });
    }
    let mask = call.mask.map(|m| mask_kind(m.dtype())).transpose()?;
    let mask_shape = call.mask.map(|m| m.shape());
    let bias_shape = call.attn_bias.map(|b| b.shape());
    let problem = AttentionProblem::from_shapes(
        &call.query.shape(),
        &call.key.shape(),
        &call.value.shape(),
        mask_shape.as_deref(),
        bias_shape.as_deref(),
        dtype,
        call.options.scale,
        call.options.softcap,
        call.options.is_causal,
        mask.unwrap_or(MaskKind::U8),
    )?;
    let Some(extension) = call.extension else { return Ok(problem) };
    if let Some(slopes) = &extension.alibi_slopes
        && (slopes.shape().as_slice() != [problem.num_heads] || slopes.dtype() != DType::F32)
    {
        return Err(FlashError::ShapeMismatch {
            what: "alibi slopes",
            detail: format!(
                "expected f32 [{}] (num_heads), got {:?} {:?}",
                problem.num_heads,
                slopes.dtype(),
                slopes.shape()
            ),
        });
    }
    Ok(AttentionProblem {
        quiet_softmax: extension.quiet_softmax,
        window: extension.window,
        alibi: extension.alibi_slopes.is_some(),
        dropout: extension.dropout,
        ..problem
    })
}

/// How many calls took each route since the process started (tests and examples read these to
/// prove which path ran).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RouteCounts {
    pub kernel: usize,
    pub fallback: usize,
}

static KERNEL_CALLS: AtomicUsize = AtomicUsize::new(0);
static FALLBACK_CALLS: AtomicUsize = AtomicUsize::new(0);
static LAST_ROUTE: Mutex<Option<Route>> = Mutex::new(None);
static LOGGED_REASONS: Mutex<Option<HashSet<String>>> = Mutex::new(None);

pub fn route_counts() -> RouteCounts {
    RouteCounts {
        kernel: KERNEL_CALLS.load(Ordering::Relaxed),
        fallback: FALLBACK_CALLS.load(Ordering::Relaxed),
    }
}

/// The route of the most recent `attention` call in this process.
pub fn last_route() -> Option<Route> {
    LAST_ROUTE.lock().map(|r| r.clone()).unwrap_or(None)
}

/// Counts the route and logs a fallback's reason once. A refusal of a
/// [`crate::flash_attention`] call (`extended`) is counted as a fallback and logged by the
/// caller, which returns it as an error or computes it with Burn ops.
fn record(route: &Route, extended: bool) {
    let counter = if route.is_kernel() { &KERNEL_CALLS } else { &FALLBACK_CALLS };
    counter.fetch_add(1, Ordering::Relaxed);
    if let Ok(mut last) = LAST_ROUTE.lock() {
        *last = Some(route.clone());
    }
    if let Route::Fallback { reason } = route
        && !extended
    {
        log_once(&format!("burn-flash-attn: attention falls back to Burn's attention_fallback: {reason}"));
    }
}

/// Logs `message` (a warning) the first time it occurs in the process.
pub(crate) fn log_once(message: &str) {
    if let Ok(mut logged) = LOGGED_REASONS.lock()
        && logged.get_or_insert_with(HashSet::new).insert(message.to_string())
    {
        log::warn!("{message}");
    }
}
