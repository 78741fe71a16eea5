//! The decorator type. `Flash<I>` is zero-sized and reuses I's tensor primitives unchanged, so a
//! `Tensor<I>` and a `Tensor<Flash<I>>` hold the very same device buffers.
//!
//! ```text
//! inference : Flash<I>                 I = CubeBackend<R, F, Int, Bool> or Fusion<CubeBackend<..>>
//! training  : Flash<Autodiff<I, C>>    <Flash<Autodiff<I>> as AutodiffBackend>::InnerBackend == Flash<I>
//! ```
//! It must be the outermost type: `Autodiff<Flash<I>>` would never see `attention`.
use core::marker::PhantomData;

use burn_backend::{BackendTypes, TensorPrimitive};

use crate::attention::FlashAttention;

/// A Burn backend that runs `I`'s ops, except `attention`, which runs the FlashAttention-2
/// kernels of this crate (forward, and backward when `I` is an `Autodiff` backend).
pub struct Flash<I> {
    _inner: PhantomData<fn() -> I>,
}

impl<I> Clone for Flash<I> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<I> Copy for Flash<I> {}

impl<I> Default for Flash<I> {
    fn default() -> Self {
        Self { _inner: PhantomData }
    }
}

impl<I> core::fmt::Debug for Flash<I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Flash")
    }
}

impl<I: FlashAttention> BackendTypes for Flash<I> {
    type Device = I::Device;
    type FloatTensorPrimitive = I::FloatTensorPrimitive;
    type FloatElem = I::FloatElem;
    type IntTensorPrimitive = I::IntTensorPrimitive;
    type IntElem = I::IntElem;
    type BoolTensorPrimitive = I::BoolTensorPrimitive;
    type BoolElem = I::BoolElem;
    type QuantizedTensorPrimitive = I::QuantizedTensorPrimitive;
}

/// `TensorPrimitive<B>` is generic over the backend, not only its primitive: a re-wrap.
pub(crate) fn primitive_to_inner<I: FlashAttention>(
    tensor: TensorPrimitive<Flash<I>>,
) -> TensorPrimitive<I> {
    match tensor {
        TensorPrimitive::Float(t) => TensorPrimitive::Float(t),
        TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(t),
    }
}

/// The inverse of [`primitive_to_inner`].
pub(crate) fn primitive_from_inner<I: FlashAttention>(
    tensor: TensorPrimitive<I>,
) -> TensorPrimitive<Flash<I>> {
    match tensor {
        TensorPrimitive::Float(t) => TensorPrimitive::Float(t),
        TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(t),
    }
}

/// Moves a tensor into the decorated backend: free, the primitive is the same.
pub fn into_flash<I: FlashAttention, const D: usize>(
    tensor: burn::tensor::Tensor<I, D>,
) -> burn::tensor::Tensor<Flash<I>, D> {
    burn::tensor::Tensor::from_primitive(primitive_from_inner(tensor.into_primitive()))
}

/// Moves a tensor out of the decorated backend: free, the primitive is the same.
pub fn from_flash<I: FlashAttention, const D: usize>(
    tensor: burn::tensor::Tensor<Flash<I>, D>,
) -> burn::tensor::Tensor<I, D> {
    burn::tensor::Tensor::from_primitive(primitive_to_inner(tensor.into_primitive()))
}
