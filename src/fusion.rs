//! `FlashKernels` for `Fusion<B>`: the forward and backward are custom ops in the fusion stream.
//! When the stream executes, each op takes `B`'s real tensors from the handle container and
//! calls `B`'s kernels (the pattern of burn-vision 0.21's cube backend). The kernel-or-fallback
//! decision is made before registering: `execute` cannot fall back.
use core::marker::PhantomData;

use burn_backend::{DType, Shape, TensorMetadata, tensor::{Device, FloatTensor}};
use burn_flash_attn_kernels::plan::{BackwardPlan, ForwardPlan};
use burn_flash_attn_kernels::{AttentionProblem, FlashError, Passes, Plan};
use burn_fusion::{
    Fusion, FusionBackend, FusionRuntime,
    stream::{Operation, OperationStreams},
};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, TensorIr};

use crate::attention::{AttentionGrads, AttentionInputs, FlashKernels, SavedForward};

type Handles<B> = HandleContainer<<<B as FusionBackend>::FusionRuntime as FusionRuntime>::FusionHandle>;

/// Which optional inputs follow q, k, v (and o, d_out, lse for the backward) in the op's inputs.
#[derive(Debug, Clone, Copy)]
struct Optionals {
    mask: bool,
    attn_bias: bool,
    alibi_slopes: bool,
}

impl Optionals {
    /// Resolves q, k, v and the trailing optional inputs of an op to `B`'s tensors.
    fn attention_inputs<B: FusionBackend>(
        self,
        handles: &mut Handles<B>,
        [q, k, v]: [&TensorIr; 3],
        rest: &[TensorIr],
    ) -> AttentionInputs<B> {
        let mut rest = rest.iter();
        let mask = self.mask.then(|| handles.get_bool_tensor::<B>(rest.next().expect("mask input")));
        let attn_bias = self
            .attn_bias
            .then(|| handles.get_float_tensor::<B>(rest.next().expect("attn_bias input")));
        let alibi_slopes = self
            .alibi_slopes
            .then(|| handles.get_float_tensor::<B>(rest.next().expect("alibi slopes input")));
        AttentionInputs {
            query: handles.get_float_tensor::<B>(q),
            key: handles.get_float_tensor::<B>(k),
            value: handles.get_float_tensor::<B>(v),
            mask,
            attn_bias,
            alibi_slopes,
        }
    }
}

/// Which kernels a [`FlashOp`] runs, with the plan the router made for them.
#[derive(Debug, Clone)]
enum Pass {
    /// Inputs q, k, v, [mask], [bias], [slopes]; outputs o, lse.
    Forward(ForwardPlan),
    /// Inputs q, k, v, o, d_out, lse, [mask], [bias], [slopes]; outputs dq, dk, dv.
    Backward(BackwardPlan),
}

/// The custom op of one flash pass in the fusion stream.
#[derive(Debug)]
struct FlashOp<B> {
    desc: CustomOpIr,
    problem: AttentionProblem,
    optionals: Optionals,
    pass: Pass,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + FlashKernels> Operation<B::FusionRuntime> for FlashOp<B> {
    fn execute(&self, handles: &mut Handles<B>) {
        let (inputs, outputs) = (self.desc.inputs.as_slice(), self.desc.outputs.as_slice());
        let results = match &self.pass {
            Pass::Forward(plan) => {
                let [q, k, v, rest @ ..] = inputs else { unreachable!("registered with q, k, v first") };
                let inputs = self.optionals.attention_inputs::<B>(handles, [q, k, v], rest);
                let saved = B::flash_forward(inputs, self.problem, plan);
                vec![saved.out, saved.lse]
            }
            Pass::Backward(plan) => {
                let [q, k, v, o, d_out, lse, rest @ ..] = inputs else {
                    unreachable!("registered with q, k, v, o, d_out, lse first")
                };
                let inputs = self.optionals.attention_inputs::<B>(handles, [q, k, v], rest);
                let saved = SavedForward {
                    out: handles.get_float_tensor::<B>(o),
                    lse: handles.get_float_tensor::<B>(lse),
                };
                let grad_out = handles.get_float_tensor::<B>(d_out);
                let grads = B::flash_backward(inputs, saved, grad_out, self.problem, plan);
                vec![grads.query, grads.key, grads.value]
            }
        };
        for (output, tensor) in outputs.iter().zip(results) {
            handles.register_float_tensor::<B>(&output.id, tensor);
        }
    }
}

/// Registers a custom op with `N` outputs of the given shapes and dtypes.
fn register<B: FusionBackend, O: Operation<B::FusionRuntime> + 'static, const N: usize>(
    name: &'static str,
    inputs: Vec<FloatOrBool<B>>,
    outputs: [(Shape, DType); N],
    build: impl FnOnce(CustomOpIr) -> O,
) -> [FloatTensor<Fusion<B>>; N] {
    let client = inputs[0].client.clone();
    let outputs = outputs.map(|(shape, dtype)| TensorIr::uninit(client.create_empty_handle(), shape, dtype));
    let streams = OperationStreams::with_inputs(&inputs);
    let inputs: Vec<TensorIr> = inputs.into_iter().map(|t| t.into_ir()).collect();
    let desc = CustomOpIr::new(name, &inputs, &outputs);
    let op = build(desc.clone());
    client
        .register(streams, OperationIr::Custom(desc), op)
        .try_into()
        .unwrap_or_else(|_| unreachable!("{name} registers {N} outputs"))
}

/// A fusion input of either kind (both are `FusionTensor`s).
type FloatOrBool<B> = burn_fusion::FusionTensor<<B as FusionBackend>::FusionRuntime>;

fn inputs_of<B: FusionBackend>(
    head: impl IntoIterator<Item = FloatOrBool<B>>,
    mask: Option<FloatOrBool<B>>,
    attn_bias: Option<FloatOrBool<B>>,
    alibi_slopes: Option<FloatOrBool<B>>,
) -> (Vec<FloatOrBool<B>>, Optionals) {
    let optionals = Optionals {
        mask: mask.is_some(),
        attn_bias: attn_bias.is_some(),
        alibi_slopes: alibi_slopes.is_some(),
    };
    (head.into_iter().chain(mask).chain(attn_bias).chain(alibi_slopes).collect(), optionals)
}

impl<B: FusionBackend + FlashKernels> FlashKernels for Fusion<B> {
    fn flash_plan(device: &Device<Self>, problem: &AttentionProblem, passes: Passes) -> Result<Plan, FlashError> {
        B::flash_plan(device, problem, passes)
    }

    fn flash_forward(inputs: AttentionInputs<Self>, problem: AttentionProblem, plan: &ForwardPlan) -> SavedForward<Self> {
        let [batch, heads, seq_q, _] = inputs.query.shape().dims::<4>();
        let dtype = inputs.query.dtype();
        let (all, optionals) =
            inputs_of::<B>([inputs.query, inputs.key, inputs.value], inputs.mask, inputs.attn_bias, inputs.alibi_slopes);
        let outputs = [
            (Shape::new([batch, heads, seq_q, problem.val_dim]), dtype),
            (Shape::new([batch, heads, seq_q]), DType::F32),
        ];
        let [out, lse] = register::<B, _, 2>("flash_attention_forward", all, outputs, |desc| {
            FlashOp::<B> { desc, problem, optionals, pass: Pass::Forward(plan.clone()), _backend: PhantomData }
        });
        SavedForward { out, lse }
    }

    fn flash_backward(
        inputs: AttentionInputs<Self>,
        saved: SavedForward<Self>,
        grad_out: FloatTensor<Self>,
        problem: AttentionProblem,
        plan: &BackwardPlan,
    ) -> AttentionGrads<Self> {
        let outputs = [&inputs.query, &inputs.key, &inputs.value].map(|t| (t.shape(), t.dtype()));
        let head = [inputs.query, inputs.key, inputs.value, saved.out, grad_out, saved.lse];
        let (all, optionals) = inputs_of::<B>(head, inputs.mask, inputs.attn_bias, inputs.alibi_slopes);
        let [query, key, value] = register::<B, _, 3>("flash_attention_backward", all, outputs, |desc| {
            FlashOp::<B> { desc, problem, optionals, pass: Pass::Backward(plan.clone()), _backend: PhantomData }
        });
        AttentionGrads { query, key, value }
    }
}
