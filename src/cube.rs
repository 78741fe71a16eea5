//! `FlashKernels` for `CubeBackend`: launches the CubeCL kernels on the backend's buffers.
use burn_backend::tensor::{Device, FloatTensor};
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_flash_attn_kernels::{AttentionProblem, FlashError};

use crate::attention::{AttentionGrads, AttentionInputs, FlashKernels, SavedForward};

impl<R, F, I, BT> FlashKernels for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn flash_support(_device: &Device<Self>, _problem: &AttentionProblem) -> Result<String, FlashError> {
        Err(FlashError::Device("the flash kernels are not built yet".into()))
    }

    fn flash_forward(_inputs: AttentionInputs<Self>, _problem: AttentionProblem) -> SavedForward<Self> {
        unreachable!("flash_support rejects every problem")
    }

    fn flash_backward(
        _inputs: AttentionInputs<Self>,
        _saved: SavedForward<Self>,
        _grad_out: FloatTensor<Self>,
        _problem: AttentionProblem,
    ) -> AttentionGrads<Self> {
        unreachable!("flash_support rejects every problem")
    }
}
