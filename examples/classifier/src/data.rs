//! Labelled texts of different lengths, and padded batches of them.
//!
//! Two sources: a directory of fortune files (`scripts/fetch_fortunes.sh`: Debian's
//! `fortunes` package, one file per topic, records separated by lines holding `%`), the topic
//! being the label; or a generated set that needs nothing from outside (sentences drawn from
//! one word list per topic, 1 to 12 of them per text). Texts are bytes; each batch is padded
//! to its longest text rounded up to a power of two, at least 64 (at most `max_len` bytes,
//! longer texts truncated), and the padding mask marks the padded positions (`true` = padding,
//! burn-nn's `mask_pad`).
//!
//! ```text
//! texts [b] --bytes, truncate to max_len--> tokens [b, s] (PAD after each text; s = the
//!                                        mask_pad [b, s]  longest, up to a power of two)
//!                                          labels [b]     (true where PAD)
//! ```
//!
//! Why powers of two: every new shape makes Burn autotune its matmuls (one compilation per
//! candidate kernel, and their keys depend on the power-of-two factors of the sizes) and our
//! kernels compile for it. With the fortunes (median 96 bytes, batches of 32) rounding to
//! multiples of 64 gave 12 padded lengths in 4 epochs, powers of two give 3 (256, 512, 1024).
use std::path::Path;

use burn::{
    data::{dataloader::batcher::Batcher, dataset::Dataset},
    tensor::{Bool, Int, Tensor, TensorData, backend::Backend},
};
use rand::{Rng, SeedableRng, rngs::StdRng, seq::SliceRandom};

use crate::Error;

/// Byte tokens 0..=255 and the padding token.
pub const VOCAB: usize = 257;
/// The token of padded positions (never attended to: the mask covers it).
pub const PAD: i32 = 256;
/// The fortune topics the classifier tells apart: the four largest that are about a subject
/// (1050, 1250, 703 and 625 fortunes in `fortunes` 1:1.99.1).
pub const FORTUNE_TOPICS: [&str; 4] = ["computers", "people", "politics", "science"];

/// Word lists of the generated topics (the label is the index).
const GENERATED_TOPICS: [&[&str]; 4] = [
    &["the compiler", "a kernel", "the network", "my laptop", "the database", "a thread"],
    &["the river", "a forest", "the mountain", "an old oak", "the meadow", "a storm"],
    &["the striker", "a referee", "the final", "our goalkeeper", "the stadium", "a penalty"],
    &["the soup", "a fresh loaf", "the oven", "a ripe pear", "the kitchen", "some garlic"],
];
const GENERATED_VERBS: [&str; 6] = ["saw", "needed", "ignored", "changed", "followed", "met"];
/// Texts per generated topic.
const GENERATED_PER_TOPIC: usize = 250;
const GENERATED_MAX_SENTENCES: usize = 12;

/// One text and its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Text {
    pub bytes: Vec<u8>,
    pub label: usize,
}

/// Texts with their topic names, shuffled once from a seed.
#[derive(Debug, Clone)]
pub struct Texts {
    pub items: Vec<Text>,
    pub topics: Vec<String>,
}

impl Texts {
    /// The fortunes of `dir/<topic>` for each of [`FORTUNE_TOPICS`].
    pub fn fortunes(dir: &Path, seed: u64) -> Result<Self, Error> {
        let mut items = Vec::new();
        for (label, topic) in FORTUNE_TOPICS.iter().enumerate() {
            let path = dir.join(topic);
            let text = std::fs::read(&path).map_err(|source| Error::Io { path, source })?;
            items.extend(split_fortunes(&text).into_iter().map(|bytes| Text { bytes, label }));
        }
        let topics = FORTUNE_TOPICS.iter().map(|t| t.to_string()).collect();
        Ok(Self::shuffled(items, topics, seed))
    }

    /// The generated set: [`GENERATED_PER_TOPIC`] texts per topic, 1 to 12 sentences each.
    pub fn generated(seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut items = Vec::new();
        for (label, words) in GENERATED_TOPICS.iter().enumerate() {
            for _ in 0..GENERATED_PER_TOPIC {
                let sentences = rng.random_range(1..=GENERATED_MAX_SENTENCES);
                let mut text = String::new();
                for _ in 0..sentences {
                    let pick = |rng: &mut StdRng| words[rng.random_range(0..words.len())];
                    let (subject, object) = (pick(&mut rng), pick(&mut rng));
                    let verb = GENERATED_VERBS[rng.random_range(0..GENERATED_VERBS.len())];
                    text.push_str(&format!("{subject} {verb} {object}. "));
                }
                items.push(Text { bytes: text.into_bytes(), label });
            }
        }
        let topics = (0..GENERATED_TOPICS.len()).map(|t| format!("topic {t}")).collect();
        Self::shuffled(items, topics, seed)
    }

    fn shuffled(mut items: Vec<Text>, topics: Vec<String>, seed: u64) -> Self {
        items.shuffle(&mut StdRng::seed_from_u64(seed));
        Self { items, topics }
    }

    /// The first `1 - valid_fraction` of the (shuffled) texts, and the rest.
    pub fn split(self, valid_fraction: f64) -> (Self, Self) {
        let valid = ((self.items.len() as f64) * valid_fraction.clamp(0.0, 1.0)).round() as usize;
        let mut train = self.items;
        let valid = train.split_off(train.len() - valid.min(train.len()));
        let topics = self.topics;
        (Self { items: train, topics: topics.clone() }, Self { items: valid, topics })
    }

    pub fn num_classes(&self) -> usize {
        self.topics.len()
    }
}

/// The records of a fortune file: the text between lines holding only `%`, trimmed, non-empty.
fn split_fortunes(text: &[u8]) -> Vec<Vec<u8>> {
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    lines
        .split(|line| *line == b"%")
        .map(|lines| lines.join(&b'\n').trim_ascii().to_vec())
        .filter(|record| !record.is_empty())
        .collect()
}

impl Dataset<Text> for Texts {
    fn get(&self, index: usize) -> Option<Text> {
        self.items.get(index).cloned()
    }

    fn len(&self) -> usize {
        self.items.len()
    }
}

/// The shortest padded length.
pub const MIN_PADDED: usize = 64;

/// The length a batch whose longest text has `longest` bytes is padded to: the next power of
/// two, at least [`MIN_PADDED`], at most `max_len`.
pub fn padded_len(longest: usize, max_len: usize) -> usize {
    longest.max(MIN_PADDED).next_power_of_two().min(max_len)
}

/// Pads the texts of a batch to the longest one, rounded up by [`padded_len`] (at most
/// `max_len` bytes, longer texts truncated).
#[derive(Debug, Clone)]
pub struct PadBatcher {
    pub max_len: usize,
}

/// `[batch, longest]` tokens, their padding mask (`true` = padding) and `[batch]` labels.
#[derive(Debug, Clone)]
pub struct TextBatch<B: Backend> {
    pub tokens: Tensor<B, 2, Int>,
    pub mask_pad: Tensor<B, 2, Bool>,
    pub labels: Tensor<B, 1, Int>,
}

impl<B: Backend> Batcher<B, Text, TextBatch<B>> for PadBatcher {
    fn batch(&self, texts: Vec<Text>, device: &B::Device) -> TextBatch<B> {
        let longest = texts.iter().map(|t| t.bytes.len()).max().unwrap_or(1);
        let longest = padded_len(longest, self.max_len);
        let mut tokens = Vec::with_capacity(texts.len() * longest);
        let mut padding = Vec::with_capacity(texts.len() * longest);
        for text in &texts {
            let kept = &text.bytes[..text.bytes.len().min(longest)];
            tokens.extend(kept.iter().map(|&b| i32::from(b)));
            tokens.extend(std::iter::repeat_n(PAD, longest - kept.len()));
            padding.extend(std::iter::repeat_n(false, kept.len()));
            padding.extend(std::iter::repeat_n(true, longest - kept.len()));
        }
        let labels: Vec<i32> = texts.iter().map(|t| t.label as i32).collect();
        let shape = [texts.len(), longest];
        TextBatch {
            tokens: Tensor::from_data(TensorData::new(tokens, shape), device),
            mask_pad: Tensor::from_data(TensorData::new(padding, shape), device),
            labels: Tensor::from_data(TensorData::new(labels, [texts.len()]), device),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fortunes_split_on_percent_lines() {
        let records = split_fortunes(b"one\nline\n%\n\n%\ntwo\n%\n");
        assert_eq!(records, vec![b"one\nline".to_vec(), b"two".to_vec()]);
    }

    #[test]
    fn padded_lengths_are_powers_of_two_within_bounds() {
        let cases = [(0, 64), (1, 64), (64, 64), (65, 128), (300, 512), (1000, 1024), (5000, 1024)];
        for (longest, padded) in cases {
            assert_eq!(padded_len(longest, 1024), padded, "longest {longest}");
        }
        // A max_len that is not a power of two still bounds the length.
        assert_eq!(padded_len(700, 600), 600);
    }

    #[test]
    fn generated_texts_have_every_label_and_many_lengths() {
        let texts = Texts::generated(3);
        assert_eq!(texts.len(), 4 * GENERATED_PER_TOPIC);
        let lengths: std::collections::BTreeSet<usize> = texts.items.iter().map(|t| t.bytes.len()).collect();
        assert!(lengths.len() > 50, "{} distinct lengths", lengths.len());
        let (train, valid) = texts.split(0.1);
        assert_eq!((train.len(), valid.len()), (900, 100));
    }
}
