//! Byte-level data: a text file, or a generated English-like corpus that needs nothing from
//! outside, and batches drawn from it in an order fixed by a seed alone (so the flash run and
//! the fallback run see the same bytes in the same order).
use std::path::Path;

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use rand::{Rng, SeedableRng, rngs::StdRng, seq::IndexedRandom};

use crate::Error;

/// Size of the generated corpus: large enough that the tiny and mid presets do not memorize
/// it within a few hundred steps, small enough to generate in milliseconds.
const GENERATED_BYTES: usize = 1 << 20;
/// Seed of the generated corpus (fixed: the corpus is part of the example, not of a run).
const GENERATED_SEED: u64 = 2024;
/// Sentences per generated paragraph.
const SENTENCES_PER_PARAGRAPH: usize = 5;

const SUBJECTS: &[&str] = &[
    "the old sailor", "a small dog", "my neighbour", "the teacher", "every child", "the farmer",
    "a tired student", "the captain", "our cat", "the baker", "a quiet girl", "the king",
];
const VERBS: &[&str] = &[
    "found", "painted", "carried", "watched", "forgot", "cooked", "sold", "built", "lost",
    "remembered", "opened", "borrowed",
];
const OBJECTS: &[&str] = &[
    "a red boat", "the heavy door", "an apple pie", "the silver key", "a long letter",
    "the broken clock", "a warm coat", "the map of the town", "a basket of eggs", "the green lamp",
];
const PLACES: &[&str] = &[
    "near the river", "in the morning", "at the market", "behind the house", "before dinner",
    "under the bridge", "after the storm", "on the hill",
];
const ENDINGS: &[&str] = &[".", ".", ".", "!", "?"];

/// A byte string to learn from.
pub struct Corpus {
    bytes: Vec<u8>,
}

impl Corpus {
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let bytes = std::fs::read(path).map_err(|source| Error::Io { path: path.into(), source })?;
        Ok(Self { bytes })
    }

    /// The built-in corpus: simple English sentences from a fixed seed, identical everywhere.
    pub fn generated() -> Self {
        let mut rng = StdRng::seed_from_u64(GENERATED_SEED);
        let pick = |rng: &mut StdRng, words: &[&'static str]| *words.choose(rng).expect("words");
        let mut text = String::with_capacity(GENERATED_BYTES);
        let mut sentence = 0;
        while text.len() < GENERATED_BYTES {
            let subject = pick(&mut rng, SUBJECTS);
            let mut first = subject.chars();
            let capital = first.next().map(|c| c.to_ascii_uppercase()).unwrap_or(' ');
            text.push(capital);
            text.push_str(first.as_str());
            text.push(' ');
            text.push_str(pick(&mut rng, VERBS));
            text.push(' ');
            text.push_str(pick(&mut rng, OBJECTS));
            if rng.random_bool(0.5) {
                text.push(' ');
                text.push_str(pick(&mut rng, PLACES));
            }
            text.push_str(pick(&mut rng, ENDINGS));
            sentence += 1;
            text.push(if sentence % SENTENCES_PER_PARAGRAPH == 0 { '\n' } else { ' ' });
        }
        Self { bytes: text.into_bytes() }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Splits off the last `fraction` of the bytes: the Learner validates on text it never
    /// trains on (a side too short for one window is `Error::CorpusTooSmall` in [`WindowStarts`]).
    pub fn split(self, fraction: f64) -> (Self, Self) {
        let tail = ((self.bytes.len() as f64) * fraction.clamp(0.0, 1.0)).round() as usize;
        let mut head = self.bytes;
        let tail = head.split_off(head.len() - tail.min(head.len()));
        (Self { bytes: head }, Self { bytes: tail })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The start offsets of random `seq + 1`-byte windows, drawn from `seed` alone: the sequence
/// [`Batcher`] consumes `batch` at a time, and the Learner's dataset holds in order.
pub struct WindowStarts {
    last_start: usize,
    rng: StdRng,
}

impl WindowStarts {
    pub fn new(corpus: &Corpus, seq: usize, seed: u64) -> Result<Self, Error> {
        if corpus.len() <= seq {
            return Err(Error::CorpusTooSmall { bytes: corpus.len(), needed: seq + 1 });
        }
        Ok(Self { last_start: corpus.len() - seq - 1, rng: StdRng::seed_from_u64(seed) })
    }
}

impl Iterator for WindowStarts {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        Some(self.rng.random_range(0..=self.last_start))
    }
}

/// `[batch, seq]` inputs and targets (shifted by one byte) of the windows starting at `starts`.
pub fn window_tensors(bytes: &[u8], seq: usize, starts: &[usize]) -> Batch {
    let mut inputs = Vec::with_capacity(starts.len() * seq);
    let mut targets = Vec::with_capacity(starts.len() * seq);
    for &start in starts {
        let window = &bytes[start..start + seq + 1];
        inputs.extend(window[..seq].iter().map(|&b| i32::from(b)));
        targets.extend(window[1..].iter().map(|&b| i32::from(b)));
    }
    let shape = [starts.len(), seq];
    Batch { inputs: TensorData::new(inputs, shape), targets: TensorData::new(targets, shape) }
}

/// Token windows of one step: `inputs[i] = bytes[o_i .. o_i + seq]`, `targets` shifted by one.
pub struct Batch {
    pub inputs: TensorData,
    pub targets: TensorData,
}

impl Batch {
    pub fn tensors<B: Backend>(
        &self,
        device: &B::Device,
    ) -> (Tensor<B, 2, Int>, Tensor<B, 2, Int>) {
        (
            Tensor::from_data(self.inputs.clone(), device),
            Tensor::from_data(self.targets.clone(), device),
        )
    }
}

/// Random windows of a corpus, in an order that depends on the seed only.
pub struct Batcher<'a> {
    corpus: &'a Corpus,
    batch: usize,
    seq: usize,
    starts: WindowStarts,
}

impl<'a> Batcher<'a> {
    pub fn new(corpus: &'a Corpus, batch: usize, seq: usize, seed: u64) -> Result<Self, Error> {
        let starts = WindowStarts::new(corpus, seq, seed)?;
        Ok(Self { corpus, batch, seq, starts })
    }

    pub fn next_batch(&mut self) -> Batch {
        let starts: Vec<usize> = self.starts.by_ref().take(self.batch).collect();
        window_tensors(&self.corpus.bytes, self.seq, &starts)
    }
}
