//! How [`crate::flash_attention`] reaches the kernels with `B: Backend` alone.
//!
//! Burn's `ModuleOps::attention` has no room for quiet softmax, windows, ALiBi or dropout, and a
//! model generic over `B: Backend` cannot name `Flash<..>`. So, on one thread, synchronously:
//!
//! ```text
//! flash_attention::<B>(..)
//!   1. is B Flash?        B::name(device) starts with "flash<" (what Flash<I>::name answers)
//!   2. offer(extension)   a per-thread slot holds the options module::attention cannot carry
//!   3. B::attention(q, k, v, mask, bias, options)
//!        Flash<I>::attention -> routed_attention::<I>: takes the offer (only the next attention
//!        call on this thread can), runs I::flash_attention with it, leaves the outcome
//!   4. outcome()          Done, Refused(reason) (nothing ran), or NotTaken
//! ```
//! An offer nobody took (a layer between did not forward `attention`) comes back as
//! [`Outcome::NotTaken`], never silently ignored; a plain `module::attention` call finds no
//! offer and keeps its logged fallback.
use core::any::Any;
use std::cell::RefCell;

use burn_backend::{
    ops::AttentionModuleOptions,
    tensor::{BoolTensor, FloatTensor},
};

use crate::attention::{Extension, FlashAttention, Refused};

enum Slot {
    /// An `Extension<T>` for the float primitive `T` of the backend that will take it.
    Offered(Box<dyn Any>),
    Done,
    Refused(String),
}

thread_local! {
    static SLOT: RefCell<Option<Slot>> = const { RefCell::new(None) };
}

/// What became of an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The kernels ran it: the tensor `attention` returned is the result.
    Done,
    /// The kernels cannot run it (the router's reason); the returned tensor is a placeholder.
    Refused(String),
    /// No `Flash` attention took the offer.
    NotTaken,
}

/// Offers `extension` to the next `Flash` attention call on this thread.
pub(crate) fn offer<T: 'static>(extension: Extension<T>) {
    SLOT.with(|slot| *slot.borrow_mut() = Some(Slot::Offered(Box::new(extension))));
}

/// Takes the outcome of the last offer (and clears the slot).
pub(crate) fn outcome() -> Outcome {
    match SLOT.with(|slot| slot.borrow_mut().take()) {
        Some(Slot::Done) => Outcome::Done,
        Some(Slot::Refused(reason)) => Outcome::Refused(reason),
        Some(Slot::Offered(_)) | None => Outcome::NotTaken,
    }
}

/// The offer waiting for a backend whose float primitive is `T`, taken; an offer for another
/// type stays (and comes back as `NotTaken`).
fn take_offer<T: 'static>() -> Option<Extension<T>> {
    SLOT.with(|slot| {
        let mut slot = slot.borrow_mut();
        match slot.take() {
            Some(Slot::Offered(offer)) => match offer.downcast::<Extension<T>>() {
                Ok(extension) => Some(*extension),
                Err(other) => {
                    *slot = Some(Slot::Offered(other));
                    None
                }
            },
            other => {
                *slot = other;
                None
            }
        }
    })
}

/// `Flash<I>::attention`: the kernels, with the offered extension if there is one.
pub(crate) fn routed_attention<I: FlashAttention>(
    query: FloatTensor<I>,
    key: FloatTensor<I>,
    value: FloatTensor<I>,
    mask: Option<BoolTensor<I>>,
    attn_bias: Option<FloatTensor<I>>,
    options: AttentionModuleOptions,
) -> FloatTensor<I> {
    let Some(extension) = take_offer::<FloatTensor<I>>() else {
        return I::flash_attention(query, key, value, mask, attn_bias, options, None)
            .expect("a call without extension is never refused");
    };
    let placeholder = query.clone();
    let (slot, out) = match I::flash_attention(query, key, value, mask, attn_bias, options, Some(extension)) {
        Ok(out) => (Slot::Done, out),
        Err(Refused(reason)) => (Slot::Refused(reason), placeholder),
    };
    SLOT.with(|cell| *cell.borrow_mut() = Some(slot));
    out
}
