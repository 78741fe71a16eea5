//! One CSV row per training step, written as the run goes (a run cut short keeps its rows).
use std::{
    fs::File,
    io::{BufRead, BufReader, BufWriter, Write},
    path::{Path, PathBuf},
};

use crate::Error;

pub const HEADER: &str = "step,loss,ms_per_step,tokens_per_s,peak_memory_mib";

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepRecord {
    /// 1-based.
    pub step: usize,
    /// Mean next-byte cross-entropy of this step's batch, in nats.
    pub loss: f64,
    /// Wall time of forward, backward and optimizer step, until the loss was read back.
    pub ms_per_step: f64,
    pub tokens_per_s: f64,
    /// The largest memory the CubeCL client had reserved so far (see `memory::MemoryProbe`).
    pub peak_memory_mib: f64,
}

impl StepRecord {
    fn to_line(self) -> String {
        format!(
            "{},{:.6},{:.3},{:.1},{:.1}",
            self.step, self.loss, self.ms_per_step, self.tokens_per_s, self.peak_memory_mib
        )
    }

    fn parse(line: &str, path: &Path, line_number: usize) -> Result<Self, Error> {
        let bad = || Error::Csv { path: path.into(), line: line_number };
        let fields: Vec<&str> = line.trim().split(',').collect();
        let [step, loss, ms, tokens, memory] = fields.as_slice() else { return Err(bad()) };
        let float = |s: &str| s.parse::<f64>().map_err(|_| bad());
        Ok(Self {
            step: step.parse().map_err(|_| bad())?,
            loss: float(loss)?,
            ms_per_step: float(ms)?,
            tokens_per_s: float(tokens)?,
            peak_memory_mib: float(memory)?,
        })
    }
}

pub struct CsvWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl CsvWriter {
    pub fn create(path: &Path) -> Result<Self, Error> {
        let io = |source| Error::Io { path: path.into(), source };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let mut out = BufWriter::new(File::create(path).map_err(io)?);
        writeln!(out, "{HEADER}").map_err(io)?;
        // On disk at once: a run cut before its first step still shows it started.
        out.flush().map_err(io)?;
        Ok(Self { path: path.into(), out })
    }

    pub fn write(&mut self, record: &StepRecord) -> Result<(), Error> {
        let io = |source| Error::Io { path: self.path.clone(), source };
        writeln!(self.out, "{}", record.to_line()).map_err(io)?;
        self.out.flush().map_err(io)
    }
}

/// The rows of a CSV written by [`CsvWriter`].
pub fn read_csv(path: &Path) -> Result<Vec<StepRecord>, Error> {
    let io = |source| Error::Io { path: path.into(), source };
    let reader = BufReader::new(File::open(path).map_err(io)?);
    let mut records = Vec::new();
    for (index, line) in reader.lines().enumerate() {
        let line = line.map_err(io)?;
        if index == 0 || line.trim().is_empty() {
            continue;
        }
        records.push(StepRecord::parse(&line, path, index + 1)?);
    }
    Ok(records)
}
