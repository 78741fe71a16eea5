//! `Flash<B>` forwards every op to `B`: for each op trait, a sample of ops gives bit-identical
//! results through `Flash<B>` and through `B`, and autodiff behaves as on `Autodiff<B>`.
use burn::tensor::{
    Int, Tensor, TensorData, Transaction, activation,
    backend::{AutodiffBackend, Backend},
    module::{avg_pool2d, embedding, max_pool2d_with_indices},
    quantization::QuantScheme,
};

use crate::common::{
    FlashInner, FlashTrain, Inner, Train, device, float, random_data, skip_without_device,
};

/// Runs the same sample of ops on backend `B`; every result read back as `TensorData`.
fn sample_ops<B: Backend>(x: &TensorData, y: &TensorData) -> Vec<(&'static str, TensorData)> {
    let a: Tensor<B, 4> = float(x);
    let b: Tensor<B, 4> = float(y);
    let dev = device::<B>();
    let ints = Tensor::<B, 1, Int>::arange(0..24, &dev).reshape([2, 3, 4]);
    let mask = a.clone().greater(b.clone());
    let table: Tensor<B, 2> = a.clone().reshape([-1, 8]);
    let indices = Tensor::<B, 2, Int>::from_data(TensorData::new(vec![0i64, 3, 1, 2], [2, 2]), &dev);
    let (pooled, pool_indices) =
        max_pool2d_with_indices(a.clone(), [2, 2], [1, 1], [0, 0], [1, 1], false);
    let quantized = a.clone().quantize_dynamic(&QuantScheme::default()).dequantize();
    let [t0, t1] = Transaction::default()
        .register(a.clone().exp())
        .register(ints.clone().sum_dim(1))
        .execute()
        .try_into()
        .expect("two reads");
    vec![
        ("float add/mul/div", ((a.clone() + b.clone()) * b.clone() / 3.0).into_data()),
        ("float exp/log", a.clone().exp().log().into_data()),
        ("float sum_dim/mean", (a.clone().sum_dim(3) + a.clone().mean_dim(2)).into_data()),
        ("float cumsum", a.clone().cumsum(3).into_data()),
        ("float swap_dims/slice/cat", Tensor::cat(vec![a.clone().swap_dims(2, 3), b.clone().swap_dims(2, 3)], 1).slice([0..1, 0..6]).into_data()),
        ("float max_dim/argmax", (a.clone().max_dim(3) + a.clone().argmax(3).float()).into_data()),
        ("float mask_fill/clamp/powf", a.clone().mask_fill(mask.clone(), 0.5).clamp(-0.5, 0.75).powf_scalar(2.0).into_data()),
        ("int arange/mul/cumsum", (ints.clone() * 3).cumsum(2).into_data()),
        ("int sum/into_float", ints.clone().sum().float().into_data()),
        ("bool greater/not/int", mask.clone().bool_not().int().into_data()),
        ("bool any/all", Tensor::cat(vec![mask.clone().any().int(), mask.clone().all().int()], 0).into_data()),
        ("module embedding", embedding(table, indices).into_data()),
        ("module avg_pool2d", avg_pool2d(a.clone(), [2, 2], [1, 1], [0, 0], true, false).into_data()),
        ("module max_pool2d_with_indices", pooled.into_data()),
        ("module max_pool2d indices", pool_indices.into_data()),
        ("activation relu/gelu/sigmoid", (activation::relu(a.clone()) + activation::gelu(b.clone()) + activation::sigmoid(a.clone())).into_data()),
        ("activation softmax", activation::softmax(a.clone(), 3).into_data()),
        ("qtensor quantize/dequantize", quantized.into_data()),
        ("transaction float", t0),
        ("transaction int", t1),
    ]
}

#[test]
fn every_op_trait_forwards_bit_identically() {
    if skip_without_device("every_op_trait_forwards_bit_identically") {
        return;
    }
    let (x, y) = (random_data([2, 3, 5, 8], 11), random_data([2, 3, 5, 8], 12));
    let plain = sample_ops::<Inner>(&x, &y);
    let flash = sample_ops::<FlashInner>(&x, &y);
    for ((name, want), (_, got)) in plain.iter().zip(&flash) {
        assert_eq!(got, want, "{name}: Flash<B> differs from B");
    }
    assert_eq!(FlashInner::name(&device::<Inner>()), format!("flash<{}>", Inner::name(&device::<Inner>())));
}

/// The three autodiff flags whose default bodies would break autodiff if not forwarded, and a
/// gradient: (plain, tracked, tracked.detach(), tracked.set_require_grad(false)) flags.
fn autodiff_flags<B: AutodiffBackend>(x: &TensorData) -> (bool, bool, bool, bool, TensorData) {
    let plain: Tensor<B, 4> = float(x);
    let tracked = plain.clone().require_grad();
    let flags = (
        plain.is_require_grad(),
        tracked.is_require_grad(),
        tracked.clone().detach().is_require_grad(),
        tracked.clone().set_require_grad(false).is_require_grad(),
    );
    let loss = (tracked.clone() * tracked.clone()).sum();
    let grads = loss.backward();
    let grad = tracked.grad(&grads).expect("tracked tensor has a gradient");
    (flags.0, flags.1, flags.2, flags.3, grad.into_data())
}

#[test]
fn autodiff_flags_behave_as_on_autodiff() {
    if skip_without_device("autodiff_flags_behave_as_on_autodiff") {
        return;
    }
    let x = random_data([1, 2, 3, 4], 13);
    let want = autodiff_flags::<Train>(&x);
    let got = autodiff_flags::<FlashTrain>(&x);
    assert_eq!((want.0, want.1), (false, true), "require_grad sets the flag on Autodiff");
    assert_eq!(got, want, "flags (plain, tracked, detached, unset) and gradient vs Autodiff");
}
