//! A PNG of the loss curves and step times of several runs, drawn without system font
//! libraries: text uses a TrueType file read at run time (ab_glyph), and the figure is drawn
//! without any text when that file is missing.
use std::path::Path;

use plotters::{prelude::*, style::FontStyle};

use crate::{Error, record::StepRecord};

/// DejaVu Sans from Debian's `fonts-dejavu-core`.
pub const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
const FONT_FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (1200, 900);
const CAPTION_PX: u32 = 24;
const LABEL_PX: u32 = 16;
const MARGIN_PX: u32 = 12;
const X_AXIS_AREA_PX: u32 = 48;
/// Wide enough for labels like `12000.0`.
const Y_AXIS_AREA_PX: u32 = 80;
/// Step 1 of a run includes kernel compilation (seconds to minutes): the step-time panel starts
/// after it so that the steady state stays readable.
const FIRST_TIMED_STEP: usize = 2;
const LINE_WIDTH: u32 = 2;
/// Headroom above the largest value so that no curve touches the frame.
const Y_HEADROOM: f64 = 1.05;
const LEGEND_LINE_PX: i32 = 20;
/// The legend box lets the curves behind it show through.
const LEGEND_OPACITY: f64 = 0.8;

/// One run to draw: its records and the name in the legend.
pub struct Series {
    pub name: String,
    pub records: Vec<StepRecord>,
}

impl Series {
    /// The file stem names the run (`flash.csv` -> `flash`).
    pub fn from_csv(path: &Path, records: Vec<StepRecord>) -> Self {
        let name = path
            .file_stem()
            .map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into());
        Self { name, records }
    }
}

/// One panel: a value of each step, drawn from `first_step` on.
struct Metric {
    title: &'static str,
    first_step: usize,
    value: fn(&StepRecord) -> f64,
    /// The axis ends at this multiple of the largest run's median, values above drawn at the
    /// top (`None`: the axis holds every value).
    cap_over_median: Option<f64>,
}

/// Step times above this multiple of the slower run's median are clipped: the stalls of
/// kernel compilation and autotuning (tens of seconds) would flatten the steady steps.
const STALL_CAP_OVER_MEDIAN: f64 = 4.0;

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Registers the font; `false` when it cannot be read or parsed (the figure then has no text).
pub fn load_font(path: &Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        log::warn!("no font at {}: the plot will have no text", path.display());
        return false;
    };
    // plotters keeps registered fonts for the life of the process.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    let registered = plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, bytes).is_ok();
    if !registered {
        log::warn!("{} is not a TrueType font: the plot will have no text", path.display());
    }
    registered
}

/// Draws loss (top) and ms per step (bottom) against the step, one colour per run.
pub fn plot(series: &[Series], out: &Path, with_text: bool) -> Result<(), Error> {
    let plot_error = |e: &dyn std::fmt::Display| Error::Plot(e.to_string());
    let root = BitMapBackend::new(out, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot_error(&e))?;
    let panels = root.split_evenly((2, 1));
    let metrics = [
        Metric { title: "loss (nats)", first_step: 1, value: |r| r.loss, cap_over_median: None },
        Metric {
            title: "ms per step (from step 2: step 1 compiles kernels)",
            first_step: FIRST_TIMED_STEP,
            value: |r| r.ms_per_step,
            cap_over_median: Some(STALL_CAP_OVER_MEDIAN),
        },
    ];
    for (panel, Metric { title, first_step, value, cap_over_median }) in panels.iter().zip(metrics) {
        let shown = |records: &'_ [StepRecord]| {
            records.iter().filter(move |r| r.step >= first_step).copied().collect::<Vec<_>>()
        };
        let max_step = series.iter().flat_map(|s| &s.records).map(|r| r.step).max().unwrap_or(1);
        let max_value = series
            .iter()
            .flat_map(|s| shown(&s.records))
            .map(|r| value(&r))
            .filter(|v| v.is_finite())
            .fold(f64::MIN_POSITIVE, f64::max);
        let cap = cap_over_median.and_then(|factor| {
            let medians = series.iter().filter_map(|s| median(shown(&s.records).iter().map(value).collect()));
            Some(factor * medians.reduce(f64::max)?).filter(|&cap| cap < max_value)
        });
        let max_y = cap.unwrap_or(max_value);
        let title = match cap {
            Some(cap) => format!("{title}; above {cap:.0} clipped"),
            None => title.to_string(),
        };
        let mut builder = ChartBuilder::on(panel);
        builder.margin(MARGIN_PX);
        if with_text {
            builder
                .caption(title, (FONT_FAMILY, CAPTION_PX))
                .x_label_area_size(X_AXIS_AREA_PX)
                .y_label_area_size(Y_AXIS_AREA_PX);
        }
        let mut chart = builder
            .build_cartesian_2d(1..max_step.max(2), 0.0..max_y * Y_HEADROOM)
            .map_err(|e| plot_error(&e))?;
        let mut mesh = chart.configure_mesh();
        // Without label areas (no text), plotters draws the grid lines and no labels.
        if with_text {
            mesh.x_desc("step").label_style((FONT_FAMILY, LABEL_PX));
        }
        mesh.draw().map_err(|e| plot_error(&e))?;
        for (index, run) in series.iter().enumerate() {
            let colour = Palette99::pick(index).stroke_width(LINE_WIDTH);
            let points = shown(&run.records).into_iter().map(|r| (r.step, value(&r).min(max_y)));
            let drawn =
                chart.draw_series(LineSeries::new(points, colour)).map_err(|e| plot_error(&e))?;
            if with_text {
                drawn.label(run.name.clone()).legend(move |(x, y)| {
                    let style = Palette99::pick(index).stroke_width(LINE_WIDTH);
                    PathElement::new([(x, y), (x + LEGEND_LINE_PX, y)], style)
                });
            }
        }
        if with_text {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(LEGEND_OPACITY))
                .border_style(BLACK)
                .label_font((FONT_FAMILY, LABEL_PX))
                .draw()
                .map_err(|e| plot_error(&e))?;
        }
    }
    root.present().map_err(|e| plot_error(&e))
}
