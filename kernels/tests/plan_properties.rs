//! Property test of the planner over random problems on the devices we target: every plan fits
//! its device or is a typed error, and planning is deterministic.
//!
//! Problems: sequence lengths 1..=4096, head and value dims 1..=256 (and a few beyond, which must
//! be `DimTooLarge`), every dtype, every option (mask u8 / u32, bias, softcap, causal, a custom
//! scale), both passes, inputs chunked or strided. Devices, simulated on the test client's
//! properties: an H200 (227 KiB, register mma, cmma, cp.async), an MI300X (64 KiB of LDS, wave64,
//! rocWMMA f16 cmma, through the HIP runtime's view), lavapipe (the client itself: 32 KiB, plane
//! size 8, no cmma) and a consumer card with 99 KiB of shared memory (else an H200).
//! On failure proptest prints the smallest failing problem and device it found.
mod support;

use burn_flash_attn_kernels::backward::{BackwardPath, GradientConfig};
use burn_flash_attn_kernels::plan::{DeviceCaps, Layout, Passes, Plan, Tuning, plan};
use burn_flash_attn_kernels::{AttentionProblem, FlashError, ForwardConfig, FloatKind, ForwardPath, MaskKind};
use cubecl::ir::DeviceProperties;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use support::{h200, mi300x};

/// Random problems tried per device and pass (each planning is microseconds: the whole test
/// stays well under a second of CI time per device).
const CASES: u32 = 5000;

/// A device to plan for: its name, properties and the runtime name they are seen through.
struct Device {
    name: &'static str,
    props: DeviceProperties,
    runtime: &'static str,
}

fn devices() -> Vec<Device> {
    let client = support::client();
    let base = client.properties();
    let mut consumer = h200(base);
    consumer.hardware.max_shared_memory_size = 99 * 1024;
    vec![
        Device { name: "h200", props: h200(base), runtime: "cuda" },
        Device { name: "mi300x", props: mi300x(base), runtime: "hip" },
        Device { name: "lavapipe", props: base.clone(), runtime: "wgpu" },
        Device { name: "consumer-99KiB", props: consumer, runtime: "cuda" },
    ]
}

fn dtype() -> impl Strategy<Value = FloatKind> {
    prop_oneof![Just(FloatKind::F16), Just(FloatKind::BF16), Just(FloatKind::F32)]
}

/// Dims 1..=256, weighted towards the ones models use (multiples of 8 up to 128).
fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => (1usize..=16).prop_map(|d| d * 8),
        2 => 1usize..=256,
        1 => Just(256usize),
    ]
}

/// Sequence lengths 1..=4096, with the block-edge lengths over-represented.
fn seq() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => 1usize..=4096,
        1 => (0usize..=6).prop_flat_map(|e| {
            let edge = 16usize << e;
            prop_oneof![Just(edge - 1), Just(edge), Just(edge + 1)]
        }),
        1 => 1usize..=20,
    ]
}

fn problem() -> impl Strategy<Value = AttentionProblem> {
    (
        (1usize..=4, 1usize..=16, seq(), seq(), dim(), dim(), dtype()),
        (
            proptest::option::of(prop_oneof![Just(MaskKind::U8), Just(MaskKind::U32)]),
            any::<bool>(),
            proptest::option::of(0.5f64..50.0),
            any::<bool>(),
            proptest::option::of(-2.0f64..2.0),
            any::<bool>(),
        ),
    )
        .prop_map(|((batch, num_heads, seq_q, seq_kv, head_dim, val_dim, dtype), options)| {
            let (mask, has_bias, softcap, causal, scale, quiet_softmax) = options;
            AttentionProblem {
                batch,
                num_heads,
                num_kv_heads: num_heads,
                seq_q,
                seq_kv,
                head_dim,
                val_dim,
                dtype,
                scale: scale.unwrap_or_else(|| AttentionProblem::default_scale(head_dim)),
                softcap,
                causal,
                mask,
                has_bias,
                quiet_softmax,
                window: None,
                alibi: false,
                dropout: None,
            }
        })
}

/// Whether a cube of `units` units and `shared` bytes fits the device, with whole planes.
fn check_cube(device: &Device, what: &str, units: u32, shared: usize) -> Result<(), TestCaseError> {
    let hardware = &device.props.hardware;
    let plane = hardware.plane_size_max;
    prop_assert!(units > 0 && units <= hardware.max_units_per_cube, "{what}: {units} units");
    prop_assert!(units.is_multiple_of(plane), "{what}: {units} units is not a whole number of {plane}-unit planes");
    prop_assert!(
        shared <= hardware.max_shared_memory_size,
        "{what}: {shared} bytes of shared memory > {}",
        hardware.max_shared_memory_size
    );
    Ok(())
}

fn check_forward(device: &Device, p: &AttentionProblem, layout: Layout, config: &ForwardConfig) -> Result<(), TestCaseError> {
    check_cube(device, "forward", config.units(), config.shared_memory_bytes())?;
    prop_assert_eq!(config.dims(), (p.head_dim as u32, p.val_dim as u32));
    prop_assert_eq!(config.score(), p.score_options());
    prop_assert_eq!(config.quiet_softmax(), p.quiet_softmax);
    prop_assert!(config.block_q() > 0 && config.block_kv() > 0);
    match config.path() {
        ForwardPath::Mma => {
            prop_assert!(layout.rows_chunked, "mma forward planned for strided rows");
            prop_assert!(p.dtype != FloatKind::F32, "mma forward for f32");
            prop_assert_eq!(device.props.hardware.plane_size_max, 32);
            prop_assert!(p.head_dim.is_multiple_of(8) && p.val_dim.is_multiple_of(8));
        }
        ForwardPath::Matrix => {
            let caps = DeviceCaps::new(&device.props, device.runtime);
            prop_assert!(caps.has_matrix_units(p.dtype), "matrix path without cmma");
        }
        ForwardPath::Portable => {}
    }
    Ok(())
}

fn check_gradient(device: &Device, p: &AttentionProblem, layout: Layout, config: &GradientConfig) -> Result<(), TestCaseError> {
    check_cube(device, &format!("{:?}", config.kernel()), config.units(), config.shared_memory_bytes())?;
    prop_assert_eq!(config.dims(), (p.head_dim as u32, p.val_dim as u32));
    prop_assert_eq!(config.score(), p.score_options());
    prop_assert!(config.blocks().0 > 0 && config.blocks().1 > 0);
    if config.path() == BackwardPath::Mma {
        prop_assert!(layout.rows_chunked, "mma backward planned for strided rows");
        prop_assert_eq!(device.props.hardware.plane_size_max, 32);
    }
    Ok(())
}

/// How many problems took each forward path, and how many the device refused.
#[derive(Default)]
struct Tally {
    paths: std::cell::RefCell<std::collections::BTreeMap<String, usize>>,
}

impl Tally {
    fn add(&self, outcome: String) {
        *self.paths.borrow_mut().entry(outcome).or_default() += 1;
    }
}

/// One problem on one device: a plan that fits, or a typed error that says why; twice the same.
fn check_problem(
    device: &Device,
    p: &AttentionProblem,
    layout: Layout,
    passes: Passes,
    tally: &Tally,
) -> Result<(), TestCaseError> {
    let caps = DeviceCaps::new(&device.props, device.runtime);
    let planned: Result<Plan, FlashError> = plan(p, &caps, layout, &Tuning::default(), passes);
    let again = plan(p, &caps, layout, &Tuning::default(), passes);
    prop_assert_eq!(&planned, &again, "planning is not deterministic");
    match planned {
        Ok(plan) => {
            let backward = plan.backward.as_ref().map(|b| format!(" + {:?}/{:?}", b.dkdv.config.path(), b.dq.config.path()));
            tally.add(format!("{}{}", plan.forward.config.path().name(), backward.unwrap_or_default()));
            check_forward(device, p, layout, &plan.forward.config)?;
            prop_assert_eq!(plan.backward.is_some(), passes == Passes::ForwardBackward);
            if let Some(backward) = &plan.backward {
                check_gradient(device, p, layout, &backward.dkdv.config)?;
                check_gradient(device, p, layout, &backward.dq.config)?;
            }
            prop_assert!(!plan.to_string().is_empty());
        }
        // The device cannot run this problem at all (a dtype it lacks): a reason, never a panic.
        Err(FlashError::Device(reason)) => {
            tally.add("refused by the device".into());
            prop_assert!(!reason.is_empty())
        }
        Err(other) => prop_assert!(false, "valid problem refused with {other:?}"),
    }
    Ok(())
}

#[test]
fn every_plan_fits_its_device_or_is_a_typed_error() {
    for device in devices() {
        for passes in [Passes::Forward, Passes::ForwardBackward] {
            let mut runner = TestRunner::new(Config { cases: CASES, failure_persistence: None, ..Config::default() });
            let strategy = (problem(), any::<bool>());
            let tally = Tally::default();
            runner
                .run(&strategy, |(p, chunked)| {
                    let layout = if chunked { Layout::CHUNKED } else { Layout::STRIDED };
                    check_problem(&device, &p, layout, passes, &tally)
                })
                .unwrap_or_else(|failure| panic!("{} {passes:?}: {failure}", device.name));
            println!("{} {passes:?}: {:?}", device.name, tally.paths.borrow());
        }
    }
}

#[test]
fn dims_beyond_256_and_empty_dims_are_typed_errors() {
    for device in devices() {
        let caps = DeviceCaps::new(&device.props, device.runtime);
        let mut runner = TestRunner::new(Config { cases: 200, failure_persistence: None, ..Config::default() });
        let strategy = (problem(), 257usize..=4096, any::<bool>());
        runner
            .run(&strategy, |(p, wide, on_head)| {
                let p = if on_head { AttentionProblem { head_dim: wide, ..p } } else { AttentionProblem { val_dim: wide, ..p } };
                let result = plan(&p, &caps, Layout::CHUNKED, &Tuning::default(), Passes::ForwardBackward);
                prop_assert!(matches!(result, Err(FlashError::DimTooLarge { .. })), "{result:?}");
                let empty = AttentionProblem { seq_q: 0, ..p };
                let result = plan(&empty, &caps, Layout::CHUNKED, &Tuning::default(), Passes::Forward);
                prop_assert!(matches!(result, Err(FlashError::EmptyDimension { .. })), "{result:?}");
                Ok(())
            })
            .unwrap_or_else(|failure| panic!("{}: {failure}", device.name));
    }
}

#[test]
fn tunings_the_kernels_cannot_take_are_typed_errors() {
    let client = support::client();
    let props = h200(client.properties());
    let caps = DeviceCaps::new(&props, "cuda");
    let p = AttentionProblem {
        batch: 2,
        num_heads: 4,
        num_kv_heads: 4,
        seq_q: 512,
        seq_kv: 512,
        head_dim: 64,
        val_dim: 64,
        dtype: FloatKind::BF16,
        scale: AttentionProblem::default_scale(64),
        softcap: None,
        causal: true,
        mask: None,
        has_bias: false,
        quiet_softmax: false,
        window: None,
        alibi: false,
        dropout: None,
    };
    let tuned = |tuning: Tuning| plan(&p, &caps, Layout::CHUNKED, &tuning, Passes::ForwardBackward);
    let rows32 = "4,32,32".parse().expect("valid text");
    let bad = burn_flash_attn_kernels::plan::MmaBlocks { planes: 0, ..rows32 };
    assert!(matches!(tuned(Tuning::default().with_forward_mma(Some(bad))), Err(FlashError::InvalidTuning(_))));
    // The gradient kernels take 16-row planes only.
    assert!(matches!(tuned(Tuning::default().with_backward_mma(Some(rows32))), Err(FlashError::InvalidTuning(_))));
    let plan = tuned(Tuning::default().with_forward_mma(Some(rows32))).expect("32-row forward planes are valid");
    assert_eq!(plan.forward.config.block_q(), 128);
    assert_eq!(plan.forward.blocks, burn_flash_attn_kernels::plan::BlockChoice::Tuned);
}
