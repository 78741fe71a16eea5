//! Backends, seeded inputs, record transfers and comparisons shared by the tests of
//! `burn_flash_attn::nn`.
use burn::module::{Module, ModuleVisitor, Param};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Record, Recorder};
use burn::tensor::{Bool, Tensor, TensorData, backend::{AutodiffBackend, Backend}};
use burn_autodiff::Autodiff;
use burn_cubecl::CubeBackend;
use burn_flash_attn::kernels::{reference::Precision, tolerance::{OUTPUT_FACTOR, check}};
use burn_flash_attn::{Flash, last_route};
use burn_fusion::Fusion;
use rand::{Rng, SeedableRng, rngs::StdRng};

use crate::oracle::Rows;

#[cfg(feature = "wgpu")]
pub type Runtime = cubecl::wgpu::WgpuRuntime;
#[cfg(all(feature = "cuda", not(feature = "wgpu")))]
pub type Runtime = cubecl::cuda::CudaRuntime;
#[cfg(all(feature = "rocm", not(any(feature = "wgpu", feature = "cuda"))))]
pub type Runtime = cubecl::hip::HipRuntime;

/// What Burn users run: the fused CubeCL backend, f32. burn-nn's modules run on it.
pub type Inner = Fusion<CubeBackend<Runtime, f32, i32, u32>>;
/// The same in bf16 (mixed-precision training's storage type), where the device has it.
pub type Bf16 = Fusion<CubeBackend<Runtime, half::bf16, i32, u32>>;
pub type FlashBf16 = Flash<Bf16>;
pub type FlashInner = Flash<Inner>;
pub type Train = Autodiff<Inner>;
pub type FlashTrain = Flash<Autodiff<Inner>>;

pub const BATCH: usize = 2;
pub const D_MODEL: usize = 64;
pub const HEADS: usize = 4;
/// Seeds Burn's RNG before each burn-nn module's initialization.
pub const INIT_SEED: u64 = 42;

/// Seeded uniform values in [-1, 1) (never zeros), the seed printed.
pub fn random_data<const D: usize>(shape: [usize; D], seed: u64) -> TensorData {
    println!("inputs {shape:?}: seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let values: Vec<f32> = (0..shape.iter().product()).map(|_| rng.random_range(-1.0..1.0)).collect();
    TensorData::new(values, shape)
}

/// An attention mask `[batch, seq_q, seq_kv]` with about `fraction` masked and key 0 never
/// masked, so that no row is fully masked (burn-nn's `min_float` fill differs there).
pub fn attention_mask(batch: usize, seq_q: usize, seq_kv: usize, fraction: f64, seed: u64) -> TensorData {
    let mut rng = StdRng::seed_from_u64(seed);
    let values: Vec<bool> = (0..batch * seq_q * seq_kv).map(|n| n % seq_kv != 0 && rng.random_bool(fraction)).collect();
    TensorData::new(values, [batch, seq_q, seq_kv])
}

/// A padding mask `[batch, seq]`: sequence `b` has `lengths[b]` valid keys.
pub fn padding_mask(lengths: &[usize], seq: usize) -> TensorData {
    let values: Vec<bool> = lengths.iter().flat_map(|&len| (0..seq).map(move |j| j >= len)).collect();
    TensorData::new(values, [lengths.len(), seq])
}

/// The causal mask `[batch, seq, seq]` (`true` above the diagonal), as burn-nn's
/// `generate_autoregressive_mask` builds it.
pub fn causal_mask(batch: usize, seq: usize) -> TensorData {
    let values: Vec<bool> = (0..batch * seq * seq).map(|n| n % seq > (n / seq) % seq).collect();
    TensorData::new(values, [batch, seq, seq])
}

pub fn float<B: Backend, const D: usize>(data: &TensorData) -> Tensor<B, D> {
    Tensor::from_data(data.clone(), &Default::default())
}

pub fn bool<B: Backend, const D: usize>(data: &TensorData) -> Tensor<B, D, Bool> {
    Tensor::from_data(data.clone(), &Default::default())
}

pub fn to_f64<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f64> {
    tensor.into_data().convert::<f64>().to_vec::<f64>().expect("f64 data")
}

/// `[batch, seq, features]` data as host rows `[batch * seq, features]`.
pub fn rows(data: &TensorData) -> Rows {
    let cols = *data.shape.last().expect("a shape");
    Rows::new(data.clone().convert::<f64>().to_vec::<f64>().expect("f64 data"), cols)
}

/// Whether (batch `b`, row `i`, key `j`) is masked by either mask (the data of
/// [`padding_mask`] and [`attention_mask`] / [`causal_mask`]).
pub fn masked_by<'a>(pad: Option<&'a TensorData>, attn: Option<&'a TensorData>) -> impl Fn(usize, usize, usize) -> bool + 'a {
    let pad = pad.map(|data| (data.to_vec::<bool>().expect("bool data"), data.shape[1]));
    let attn = attn.map(|data| (data.to_vec::<bool>().expect("bool data"), data.shape[1], data.shape[2]));
    move |b, i, j| {
        pad.as_ref().is_some_and(|(values, seq)| values[b * seq + j])
            || attn.as_ref().is_some_and(|(values, seq_q, seq_kv)| values[(b * seq_q + i) * seq_kv + j])
    }
}

/// `record` saved to bytes by one backend's recorder and loaded as `R` by another's: what a
/// model file does between two programs.
pub fn through_bytes<B1: Backend, B2: Backend, R1: Record<B1>, R2: Record<B2>>(record: R1) -> R2 {
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = Recorder::<B1>::record(&recorder, record, ()).expect("record saved");
    Recorder::<B2>::load(&recorder, bytes, &Default::default()).expect("record loaded")
}

/// `module` with its parameters initialized. Burn initializes parameters lazily, on first use,
/// and a clone of an uninitialized parameter initializes on its own, from the random state of
/// that moment: without this, two clones of one fresh module hold different values.
pub fn materialized<B: Backend, M: Module<B>>(module: M) -> M {
    struct Touch;
    impl<B: Backend> ModuleVisitor<B> for Touch {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let _ = param.val();
        }
    }
    module.visit(&mut Touch);
    module
}

/// Every float parameter of a module, flattened, in visiting order (the field order, which
/// ours and burn-nn's share).
pub fn parameters<B: Backend, M: Module<B>>(module: &M) -> Vec<Vec<f64>> {
    struct Collect(Vec<Vec<f64>>);
    impl<B: Backend> ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(to_f64(param.val()));
        }
    }
    let mut collect = Collect(Vec::new());
    module.visit(&mut collect);
    collect.0
}

/// The gradient of every float parameter, in visiting order.
pub fn gradients<B: AutodiffBackend, M: Module<B>>(module: &M, grads: &B::Gradients) -> Vec<Vec<f64>> {
    struct Collect<'a, B: AutodiffBackend>(Vec<Vec<f64>>, &'a B::Gradients);
    impl<B: AutodiffBackend> ModuleVisitor<B> for Collect<'_, B> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            self.0.push(to_f64(param.val().grad(self.1).expect("a gradient")));
        }
    }
    let mut collect = Collect(Vec::new(), grads);
    module.visit(&mut collect);
    collect.0
}

/// The FlashAttention rule for outputs: `max|out − ref| ≤ 2 · max|plain − ref| + atol(f32)`.
pub fn assert_rule(name: &str, out: &[f64], plain: &[f64], reference: &[f64]) {
    check(name, out, plain, reference, OUTPUT_FACTOR, Precision::F32).unwrap_or_else(|error| panic!("{error}"));
}

/// Whether the device computes in bf16 (not lavapipe's WGPU); prints why a bf16 test skips.
pub fn bf16_supported(name: &str) -> bool {
    let supported = Bf16::supports_dtype(&Default::default(), burn::tensor::DType::BF16);
    if !supported {
        println!("SKIPPED {name}: the device has no bf16");
    }
    supported
}

/// burn-nn's f32 `module` saved and loaded as burn-nn in bf16 (`init_theirs` builds the empty
/// module), and `ours` (ours on `Flash<bf16>`, loaded from the same bytes) saved and loaded
/// back as burn-nn in bf16: every parameter of the two bf16 burn-nn modules is the same, bit for
/// bit. Returns the bf16 burn-nn module (the plain implementation) and ours.
pub fn bf16_round_trip<T: Module<Inner>, TB: Module<Bf16>, O: Module<FlashBf16>>(
    name: &str,
    module: &T,
    init_theirs: impl Fn() -> TB,
    ours: O,
) -> (TB, O) {
    let theirs = init_theirs().load_record(through_bytes::<Inner, Bf16, _, _>(module.clone().into_record()));
    let back = init_theirs().load_record(through_bytes::<FlashBf16, Bf16, _, _>(ours.clone().into_record()));
    assert_eq!(parameters(&back), parameters(&theirs), "{name}: ours (bf16) -> bytes -> burn-nn (bf16)");
    (theirs, ours)
}

/// `data` rounded to bf16 and back: the inputs every implementation of a bf16 test sees.
pub fn bf16_rounded(data: &TensorData) -> TensorData {
    data.clone().convert::<half::bf16>().convert::<f32>()
}

/// The FlashAttention rule for bf16 outputs: `max|out − ref| ≤ 2 · max|plain − ref| +
/// atol(bf16)`, the plain implementation being burn-nn's module in bf16.
pub fn assert_rule_bf16(name: &str, out: &[f64], plain: &[f64], reference: &[f64]) {
    check(name, out, plain, reference, OUTPUT_FACTOR, Precision::BF16).unwrap_or_else(|error| panic!("{error}"));
}

/// The last attention call took the FlashAttention kernels.
pub fn assert_kernel_route(name: &str) {
    let route = last_route().expect("attention was routed");
    assert!(route.is_kernel(), "{name}: {route}");
}
