//! Quickstart: one attention problem through `Flash<Wgpu>` and through plain Burn.
//!
//! `cargo run --release --example quickstart` (WGPU; on a machine without a GPU, Mesa lavapipe).
use std::panic;

use burn::backend::Wgpu;
use burn::tensor::{
    Distribution, Tensor,
    backend::Backend,
    module::{attention, attention_fallback},
    ops::AttentionModuleOptions,
};
use burn_flash_attn::{Flash, from_flash, into_flash, last_route};

/// Batch, heads, query length, key/value length, head dim: seq_q != seq_kv to show the
/// bottom-right causal alignment.
const SHAPE_Q: [usize; 4] = [2, 4, 100, 64];
const SHAPE_KV: [usize; 4] = [2, 4, 140, 64];

fn main() {
    let device = Default::default();
    // A machine with no WGPU adapter panics inside wgpu's device setup: say so plainly instead.
    panic::set_hook(Box::new(|_| {}));
    let adapter = panic::catch_unwind(|| Wgpu::<f32>::name(&Default::default()));
    let _ = panic::take_hook();
    let Ok(adapter) = adapter else {
        eprintln!(
            "No WGPU adapter found. Install a Vulkan driver (on Debian: `apt-get install -y \
             mesa-vulkan-drivers libvulkan1` for the CPU rasterizer lavapipe) or run on a GPU."
        );
        std::process::exit(2);
    };
    println!("backend: {adapter}");

    let q = Tensor::<Wgpu, 4>::random(SHAPE_Q, Distribution::Normal(0.0, 1.0), &device);
    let k = Tensor::<Wgpu, 4>::random(SHAPE_KV, Distribution::Normal(0.0, 1.0), &device);
    let v = Tensor::<Wgpu, 4>::random(SHAPE_KV, Distribution::Normal(0.0, 1.0), &device);
    let options = AttentionModuleOptions { is_causal: true, ..Default::default() };

    let flash = attention::<Flash<Wgpu>>(
        into_flash(q.clone()),
        into_flash(k.clone()),
        into_flash(v.clone()),
        None,
        None,
        options,
    );
    let route = last_route().expect("attention was routed");
    // Burn's reference semantics (its own backend may pick cubek, whose causal mask is top-left).
    let burn = attention_fallback::<Wgpu>(q, k, v, None, None, options);
    let diff = (from_flash(flash) - burn).abs().max().into_scalar();
    println!("attention {SHAPE_Q:?} x {SHAPE_KV:?}, causal (bottom-right)");
    println!("route: {route}");
    println!("max |flash - burn attention_fallback| = {diff:.3e}");
}
