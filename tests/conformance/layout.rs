//! Compile-time checks of the type layouts a Burn user writes (nothing runs).
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_autodiff::{Autodiff, checkpoint::strategy::BalancedCheckpointing};
use burn_flash_attn::Flash;
use core::marker::PhantomData;

use crate::common::{Cube, Inner};

fn is_backend<B: Backend>() {}
fn is_autodiff<B: AutodiffBackend>() {}
fn same_type<T>(_: PhantomData<T>, _: PhantomData<T>) {}

#[test]
fn flash_autodiff_inner_backend_is_flash_of_inner() {
    is_backend::<Flash<Cube>>();
    is_backend::<Flash<Inner>>();
    is_autodiff::<Flash<Autodiff<Cube>>>();
    is_autodiff::<Flash<Autodiff<Inner>>>();
    is_autodiff::<Flash<Autodiff<Inner, BalancedCheckpointing>>>();
    same_type(
        PhantomData::<<Flash<Autodiff<Inner>> as AutodiffBackend>::InnerBackend>,
        PhantomData::<Flash<Inner>>,
    );
    same_type(
        PhantomData::<<Flash<Autodiff<Cube, BalancedCheckpointing>> as AutodiffBackend>::InnerBackend>,
        PhantomData::<Flash<Cube>>,
    );
}
