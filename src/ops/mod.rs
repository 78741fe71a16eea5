//! Pure forwarding of every Burn op trait from `Flash<I>` to `I`, one file per trait, generated
//! by `scripts/gen_forwarding.py` (only `attention` and `Backend::name` do not forward).

mod activation;
mod backend;
mod bool;
mod float;
mod int;
mod module;
mod qtensor;
mod transaction;

/// The names the generated signatures use.
mod prelude {
    pub(crate) use crate::backend::{Flash, primitive_from_inner, primitive_to_inner};
    pub(crate) use crate::attention::FlashAttention;
    pub(crate) use burn_backend::{
        AutodiffBackend, Backend, DTypeUsageSet, Distribution, ExecutionError, Scalar, TensorData, TensorPrimitive,
        ops::*,
        quantization::QuantizationParametersPrimitive,
        tensor::{BoolTensor, Device, FloatTensor, IntTensor, QuantizedTensor},
    };
    pub(crate) use burn_std::{
        BoolDType, DType, FloatDType, IntDType, Shape, Slice, quantization::QuantScheme,
    };
    #[cfg(feature = "distributed")]
    pub(crate) use burn_backend::distributed::{DistributedParamId, DistributedParams};
    pub(crate) use core::{future::Future, ops::Range};
}
