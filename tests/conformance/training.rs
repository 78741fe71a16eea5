//! A Burn model (Linear layers + `module::attention`) trains two Adam steps through
//! `Flash<Autodiff<Fusion<CubeBackend>>>` with the same numbers as plain `Autodiff<..>`, and
//! `model.valid()` (whose backend is `Flash<Fusion<..>>`) runs.
use burn::{
    module::{AutodiffModule, Module},
    nn::{Linear, LinearConfig},
    optim::{AdamConfig, GradientsParams, Optimizer},
    tensor::{
        Tensor, TensorData,
        backend::{AutodiffBackend, Backend},
        module::attention,
        ops::AttentionModuleOptions,
    },
};
use serial_test::serial;

use crate::common::{
    FlashTrain, Train, device, float, max_abs_diff, random_data, skip_without_device, to_f64,
};

const D_MODEL: usize = 16;
const HEADS: usize = 2;
const SEQ: usize = 9;
const BATCH: usize = 2;
const SEED: u64 = 42;
const LEARNING_RATE: f64 = 1e-2;
const STEPS: usize = 2;
/// f32 flash vs f32 decomposed attention, through a small model and two Adam steps.
const TOLERANCE: f64 = 1e-4;

#[derive(Module, Debug)]
struct TinyAttention<B: Backend> {
    qkv: Linear<B>,
    out: Linear<B>,
}

impl<B: Backend> TinyAttention<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            qkv: LinearConfig::new(D_MODEL, 3 * D_MODEL).init(device),
            out: LinearConfig::new(D_MODEL, D_MODEL).init(device),
        }
    }

    /// `x: [batch, seq, d_model]`, causal self-attention.
    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [b, s, d] = x.dims();
        let heads = |t: Tensor<B, 3>| t.reshape([b, s, HEADS, d / HEADS]).swap_dims(1, 2);
        let [q, k, v] = self.qkv.forward(x).chunk(3, 2).try_into().expect("three chunks");
        let options = AttentionModuleOptions { is_causal: true, ..Default::default() };
        let y = attention(heads(q), heads(k), heads(v), None, None, options);
        self.out.forward(y.swap_dims(1, 2).reshape([b, s, d]))
    }
}

/// Losses of each step, the final parameters, and the `valid()` model's output.
fn train<B: AutodiffBackend>(x: &TensorData, target: &TensorData) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    B::seed(&device::<B>(), SEED);
    let mut model = TinyAttention::<B>::new(&device::<B>());
    let mut optim = AdamConfig::new().init::<B, TinyAttention<B>>();
    let x3 = |d: &TensorData| float::<B, 4>(d).reshape([BATCH, SEQ, D_MODEL]);
    let mut losses = Vec::new();
    for _ in 0..STEPS {
        let loss = (model.forward(x3(x)) - x3(target)).powf_scalar(2.0).mean();
        losses.push(to_f64(loss.clone().into_data())[0]);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(LEARNING_RATE, model, grads);
    }
    let params = to_f64(model.qkv.weight.val().into_data());
    let valid = model.valid();
    let x_valid = float::<B::InnerBackend, 4>(x).reshape([BATCH, SEQ, D_MODEL]);
    (losses, params, to_f64(valid.forward(x_valid).into_data()))
}

#[test]
#[serial]
fn two_adam_steps_match_plain_autodiff() {
    if skip_without_device("two_adam_steps_match_plain_autodiff") {
        return;
    }
    let x = random_data([1, BATCH, SEQ, D_MODEL], 1);
    let target = random_data([1, BATCH, SEQ, D_MODEL], 2);
    let (want_losses, want_params, want_valid) = train::<Train>(&x, &target);
    let (losses, params, valid) = train::<FlashTrain>(&x, &target);
    println!("losses: autodiff {want_losses:?}, flash {losses:?}");
    assert!(losses.iter().all(|l| l.is_finite()));
    let (d_losses, d_params, d_valid) =
        (max_abs_diff(&losses, &want_losses), max_abs_diff(&params, &want_params), max_abs_diff(&valid, &want_valid));
    println!("max |flash - autodiff|: losses {d_losses:e}, parameters {d_params:e}, valid() {d_valid:e}");
    assert!(d_losses <= TOLERANCE, "losses {losses:?} vs {want_losses:?}");
    assert!(d_params <= TOLERANCE, "parameters after {STEPS} steps differ by {d_params:e}");
    assert!(d_valid <= TOLERANCE, "valid() outputs differ by {d_valid:e}");
}
