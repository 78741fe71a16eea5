//! What a step hands to burn-train's metrics: burn-train's `ClassificationOutput` (loss,
//! accuracy) plus the tokens of the padded batch, for `flash_gpt`'s step metric (tokens/s,
//! step time and peak memory, one CSV row per step).
use burn::{
    backend::Flex,
    tensor::{ElementConversion, backend::Backend},
    train::{
        ClassificationOutput, ItemLazy,
        metric::{AccuracyInput, Adaptor, LossInput},
    },
};
use flash_gpt::learner::StepStats;

pub struct ClassifierOutput<B: Backend> {
    pub output: ClassificationOutput<B>,
    /// Positions of the padded batch, padding included (`batch x longest`).
    pub tokens: usize,
}

/// [`ClassifierOutput`] read back on the metrics thread.
pub struct ClassifierStats {
    pub output: ClassificationOutput<Flex>,
    pub step: StepStats,
}

impl<B: Backend> ItemLazy for ClassifierOutput<B> {
    type ItemSync = ClassifierStats;

    fn sync(self) -> ClassifierStats {
        let output = self.output.sync();
        let loss = output.loss.clone().into_scalar().elem::<f64>();
        ClassifierStats { output, step: StepStats { loss, tokens: self.tokens } }
    }
}

impl Adaptor<AccuracyInput<Flex>> for ClassifierStats {
    fn adapt(&self) -> AccuracyInput<Flex> {
        self.output.adapt()
    }
}

impl Adaptor<LossInput<Flex>> for ClassifierStats {
    fn adapt(&self) -> LossInput<Flex> {
        self.output.adapt()
    }
}

impl Adaptor<StepStats> for ClassifierStats {
    fn adapt(&self) -> StepStats {
        self.step
    }
}
