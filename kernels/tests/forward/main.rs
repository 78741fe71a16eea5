//! The forward kernels against the f64 reference, with the FlashAttention tolerance rule.
//!
//! Each case draws seeded inputs (the seed derives from the test's name and is printed and in
//! every failure message; FLASH_TEST_SEED=n overrides it),
//! poisons the outputs with NaN, launches, and checks o (factor OUTPUT_FACTOR) and lse (rows
//! with something visible; fully masked rows must have lse == f32::MAX and o == 0).
//! Cases the device cannot run (bf16 or u8 masks on lavapipe, the matrix path without cmma)
//! print why and pass.
#[path = "../support/mod.rs"]
mod support;

/// One `#[test]` per case, named after it.
macro_rules! forward_cases {
    ($($name:ident: $case:expr;)*) => {
        $(
            #[test]
            fn $name() {
                crate::run::run(stringify!($name), $case);
            }
        )*
    };
}

// After the macro: macro_rules! is visible only to the modules declared below it.
mod case;
mod layouts;
mod options;
mod paths;
mod run;
mod shapes;

use burn_flash_attn_kernels::FlashError;
use burn_flash_attn_kernels::FloatKind::F32;
use burn_flash_attn_kernels::ForwardPath;
use burn_flash_attn_kernels::forward::{ForwardTensors, flash_attention_forward};
use burn_flash_attn_kernels::plan::DeviceCaps;

use case::case;
use support::{Elem, client, filled, planning};

#[test]
fn launcher_refuses_tensors_that_disagree_with_the_problem() {
    let client = client();
    let problem = case(F32, 32, 10, 12).problem();
    let float = Elem::Float(F32);
    let tensor = |shape: &[usize]| filled(&client, shape, float, 1.0);
    let (q, k, v) = (
        tensor(&[1, 1, 10, 32]),
        tensor(&[1, 1, 12, 32]),
        tensor(&[1, 1, 12, 32]),
    );
    let (wrong_o, lse) = (tensor(&[1, 1, 10, 31]), tensor(&[1, 1, 10]));
    let tensors = ForwardTensors {
        q: q.binding(),
        k: k.binding(),
        v: v.binding(),
        mask: None,
        bias: None,
        slopes: None,
        o: wrong_o.binding(),
        lse: lse.binding(),
    };
    // The portable path, which every device runs: what is checked is the launcher, not a path
    // (BURN_FLASH_FWD_PATH=matrix would refuse f32).
    let layout = tensors.layout(F32);
    let plan = planning::forward_plan_for(&DeviceCaps::of(&client), &problem, layout, Some(ForwardPath::Portable))
        .expect("planned");
    let result = flash_attention_forward(&client, &problem, &plan, tensors);
    assert!(
        matches!(
            result,
            Err(FlashError::ShapeMismatch { what: "output", .. })
        ),
        "{result:?}"
    );
}
