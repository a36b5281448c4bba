//! `spares plot`: the seeds' figures from campaign results, as SVG and PNG.
//!
//! The x axis is always the number of failed nodes. `collisions` draws the best, mean and
//! worst largest link load per method, `survival` the share of jobs still alive, `selection`
//! and `cumulative-selection` the share of substitutions of each degree for one method as
//! stacked bars (journal seed, Figures 14 and 15).
//!
//! Text in the PNG is drawn with a TrueType font read at run time (DejaVu Sans from
//! `fonts-dejavu-core` on Debian, or the file named by `SPARES_FONT`); the SVG names the
//! `sans-serif` family and leaves the font to the viewer.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::register_font;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use topology::grid::format_shape;
use topology::simulate::{MethodResults, Results};

/// Image width in pixels.
pub const WIDTH: u32 = 1000;
/// Image height in pixels.
pub const HEIGHT: u32 = 600;

// plotters' text sizes are line heights: the glyphs are 1/1.24 of them (ticks at 16 px).
const TITLE_SIZE: u32 = 30;
const CAPTION_SIZE: u32 = 26;
const LABEL_SIZE: u32 = 22;
const TICK_SIZE: u32 = 20;

/// Font files tried in order when `SPARES_FONT` is not set.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
];

/// Which figure to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Figure {
    /// Best, mean and worst collisions (largest link load) per method.
    Collisions,
    /// Survival rate per method, in %.
    Survival,
    /// Selection rate per degree at each failure, for one method (journal seed, Fig. 14).
    Selection,
    /// Cumulative selection rate per degree, for one method (journal seed, Fig. 15).
    CumulativeSelection,
}

/// Draws `figure` from `results` and writes it as SVG and PNG.
///
/// If `output` ends in `.svg` or `.png`, both `<stem>.svg` and `<stem>.png` are written;
/// otherwise `output` is the stem. `method` picks the method of the selection figures (default:
/// the first) and restricts the collisions and survival figures to that method. Returns the
/// paths written, SVG first.
pub fn plot(
    results: &Results,
    figure: Figure,
    method: Option<&str>,
    output: &Path,
) -> Result<Vec<PathBuf>> {
    let methods = pick_methods(results, figure, method)?;
    let (svg_path, png_path) = output_paths(output);
    load_font()?;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        draw(root, results, figure, &methods)?;
    }
    std::fs::write(&svg_path, svg)
        .with_context(|| format!("cannot write {}", svg_path.display()))?;

    {
        let root = BitMapBackend::new(&png_path, (WIDTH, HEIGHT)).into_drawing_area();
        draw(root, results, figure, &methods)
            .with_context(|| format!("cannot write {}", png_path.display()))?;
    }
    Ok(vec![svg_path, png_path])
}

/// The methods a figure shows, checking the name asked for.
fn pick_methods<'a>(
    results: &'a Results,
    figure: Figure,
    method: Option<&str>,
) -> Result<Vec<&'a MethodResults>> {
    if results.methods.is_empty() {
        bail!("these results hold no method: nothing to plot");
    }
    match method {
        Some(name) => match results.methods.iter().find(|m| m.method == name) {
            Some(m) => Ok(vec![m]),
            None => Err(anyhow!(
                "no method '{name}' in these results; they hold: {}",
                results
                    .methods
                    .iter()
                    .map(|m| m.method.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        },
        None => match figure {
            Figure::Selection | Figure::CumulativeSelection => Ok(vec![&results.methods[0]]),
            Figure::Collisions | Figure::Survival => Ok(results.methods.iter().collect()),
        },
    }
}

/// `out.svg`/`out.png` → both with that stem; anything else is the stem itself.
fn output_paths(output: &Path) -> (PathBuf, PathBuf) {
    let is_image = output
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("svg") || e.eq_ignore_ascii_case("png"));
    let stem = if is_image {
        output.with_extension("")
    } else {
        output.to_path_buf()
    };
    let with = |ext: &str| {
        let mut s: OsString = stem.clone().into_os_string();
        s.push(ext);
        PathBuf::from(s)
    };
    (with(".svg"), with(".png"))
}

/// Registers a TrueType font as plotters' `sans-serif`, once per process.
fn load_font() -> Result<()> {
    static FONT: OnceLock<Result<(), String>> = OnceLock::new();
    FONT.get_or_init(|| {
        let candidates: Vec<PathBuf> = match std::env::var_os("SPARES_FONT") {
            Some(p) => vec![PathBuf::from(p)],
            None => FONT_PATHS.iter().map(PathBuf::from).collect(),
        };
        for path in &candidates {
            if let Ok(bytes) = std::fs::read(path) {
                // plotters keeps fonts for the whole process: the bytes live as long.
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return register_font("sans-serif", FontStyle::Normal, bytes)
                    .map_err(|_| format!("{} is not a usable TrueType font", path.display()));
            }
        }
        Err(format!(
            "no font found for the figures' text (tried {}); install the Debian package \
             fonts-dejavu-core, or name a .ttf file in SPARES_FONT",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// `12x12x12, 3D(2,1), 7p, 3,686,400 samples`.
fn campaign_title(results: &Results) -> String {
    let c = &results.campaign;
    let mut parts = Vec::new();
    let shape = format_shape(&c.box_extents);
    if let Some(t) = c.topology.as_ref().filter(|t| **t != shape) {
        parts.push(t.clone());
    }
    parts.push(shape);
    parts.push(c.spares.clone());
    parts.push(c.pattern.clone());
    if c.exhaustive {
        let cases = results
            .methods
            .first()
            .and_then(|m| m.steps.iter().map(|s| s.cases).max())
            .unwrap_or(0);
        parts.push(format!("{} sequences (exhaustive)", thousands(cases)));
    } else {
        parts.push(format!("{} samples", thousands(c.samples)));
    }
    let mut title = parts.join(", ");
    if !results.is_complete() {
        title.push_str(&format!(
            " (shards {} of {})",
            results.shards.len(),
            results.shard_count
        ));
    }
    title
}

/// `3686400` → `3,686,400`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|group| std::str::from_utf8(group).unwrap_or_default())
        .collect::<Vec<_>>()
        .join(",")
}

/// Distinct colours (the usual ten-colour qualitative palette).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Mark {
    Solid,
    /// Long dashes.
    Dashed,
    /// Short dashes.
    Dotted,
    /// A filled box (stacked bars).
    Fill,
}

struct LegendEntry {
    label: String,
    colour: RGBColor,
    mark: Mark,
    /// A dot on each point (re-mapped figures, known only at some failure counts).
    dots: bool,
}

/// One line of a chart: its points (x, y) and how it is drawn.
struct Line {
    points: Vec<(f64, f64)>,
    colour: RGBColor,
    mark: Mark,
    width: u32,
    /// A dot on each point.
    dots: bool,
}

/// Everything a figure puts on its chart.
enum Content {
    /// Lines.
    Lines(Vec<Line>),
    /// Stacked bars: per x, the band (lower, upper) of each degree.
    Stacked(Vec<(f64, Vec<(f64, f64)>)>),
}

struct Spec {
    caption: String,
    y_desc: &'static str,
    y_max: f64,
    percent: bool,
    content: Content,
    legend: Vec<LegendEntry>,
}

fn build(figure: Figure, methods: &[&MethodResults]) -> Spec {
    match figure {
        Figure::Collisions => {
            let mut lines = Vec::new();
            let mut legend = Vec::new();
            let mut y_max: f64 = 1.0;
            for (i, m) in methods.iter().enumerate() {
                let c = colour(i);
                let series = |f: &dyn Fn(&topology::simulate::StepStats) -> Option<f64>| {
                    m.steps
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.alive > 0)
                        .filter_map(|(x, s)| f(s).map(|y| (x as f64, y)))
                        .collect::<Vec<_>>()
                };
                let worst = series(&|s| s.worst().map(f64::from));
                let mean = series(&|s| s.mean());
                let best = series(&|s| s.best().map(f64::from));
                y_max = worst.iter().map(|p| p.1).fold(y_max, f64::max);
                for (points, what, mark, width) in [
                    (worst, "worst", Mark::Dashed, 2),
                    (mean, "mean", Mark::Solid, 3),
                    (best, "best", Mark::Dotted, 2),
                ] {
                    lines.push(Line {
                        points,
                        colour: c,
                        mark,
                        width,
                        dots: false,
                    });
                    legend.push(LegendEntry {
                        label: format!("{} {what}", m.method),
                        colour: c,
                        mark,
                        dots: false,
                    });
                }
                // Re-mapped figures (--remap-at): dotted points at their failure counts.
                let remapped = |f: &dyn Fn(&topology::simulate::StepStats) -> Option<f64>| {
                    m.remapped
                        .iter()
                        .filter(|r| r.traffic.alive > 0)
                        .filter_map(|r| f(&r.traffic).map(|y| (f64::from(r.failed), y)))
                        .collect::<Vec<_>>()
                };
                if !m.remapped.is_empty() {
                    let worst = remapped(&|s| s.worst().map(f64::from));
                    let mean = remapped(&|s| s.mean());
                    y_max = worst.iter().map(|p| p.1).fold(y_max, f64::max);
                    for (points, what, mark) in [
                        (mean, "re-mapped mean", Mark::Solid),
                        (worst, "re-mapped worst", Mark::Dashed),
                    ] {
                        lines.push(Line {
                            points,
                            colour: c,
                            mark,
                            width: 1,
                            dots: true,
                        });
                        legend.push(LegendEntry {
                            label: format!("{} {what}", m.method),
                            colour: c,
                            mark,
                            dots: true,
                        });
                    }
                }
            }
            Spec {
                caption: "Collisions (largest link load) after each failure".into(),
                y_desc: "collisions",
                y_max: (y_max * 1.1).ceil().max(y_max + 1.0),
                percent: false,
                content: Content::Lines(lines),
                legend,
            }
        }
        Figure::Survival => {
            let mut lines = Vec::new();
            let mut legend = Vec::new();
            // Methods often share the 100 % line: earlier ones are drawn wider, so each stays
            // visible as a band around the ones drawn over it.
            let n = methods.len();
            let width = |i: usize| 2 + (n - 1 - i) as u32 * 12 / (n.max(2) - 1) as u32;
            for (i, m) in methods.iter().enumerate() {
                let points = m
                    .steps
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.cases > 0)
                    .map(|(x, s)| (x as f64, 100.0 * s.survival()))
                    .collect();
                lines.push(Line {
                    points,
                    colour: colour(i),
                    mark: Mark::Solid,
                    width: width(i),
                    dots: false,
                });
                legend.push(LegendEntry {
                    label: m.method.clone(),
                    colour: colour(i),
                    mark: Mark::Solid,
                    dots: false,
                });
            }
            Spec {
                caption: "Survival rate after each failure".into(),
                y_desc: "survival rate (%)",
                y_max: 102.0,
                percent: true,
                content: Content::Lines(lines),
                legend,
            }
        }
        Figure::Selection | Figure::CumulativeSelection => {
            let m = methods[0];
            let cumulative = figure == Figure::CumulativeSelection;
            let degrees = m.steps.iter().map(|s| s.selected.len()).max().unwrap_or(0);
            let mut bars = Vec::new();
            let mut total = 0u64;
            for (x, s) in m.steps.iter().enumerate() {
                total += s.selected.iter().sum::<u64>();
                let rates = if cumulative {
                    if total == 0 {
                        continue;
                    }
                    m.cumulative_selection(x)
                } else {
                    if s.selected.iter().all(|&n| n == 0) {
                        continue;
                    }
                    m.step_selection(x)
                };
                let mut lower = 0.0;
                let bands = (0..degrees)
                    .map(|k| {
                        let upper = lower + 100.0 * rates.get(k).copied().unwrap_or(0.0);
                        let band = (lower, upper);
                        lower = upper;
                        band
                    })
                    .collect();
                bars.push((x as f64, bands));
            }
            // Top of the stack first, as the eye reads it.
            let legend = (0..degrees)
                .rev()
                .map(|k| LegendEntry {
                    label: format!("{k}D"),
                    colour: degree_colour(k),
                    mark: Mark::Fill,
                    dots: false,
                })
                .collect();
            let (what, y_desc) = if cumulative {
                ("Cumulative selection rate", "cumulative selection rate (%)")
            } else {
                ("Selection rate", "selection rate (%)")
            };
            Spec {
                caption: format!("{what} per degree, {}", m.method),
                y_desc,
                y_max: 100.0,
                percent: true,
                content: Content::Stacked(bars),
                legend,
            }
        }
    }
}

/// 0D grey, then the palette's first colours for 1D, 2D, 3D...
fn degree_colour(k: usize) -> RGBColor {
    if k == 0 {
        PALETTE[7]
    } else {
        colour(k - 1)
    }
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    results: &Results,
    figure: Figure,
    methods: &[&MethodResults],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let spec = build(figure, methods);
    let failures = results
        .campaign
        .failures
        .max(
            methods
                .iter()
                .map(|m| m.steps.len().saturating_sub(1) as u32)
                .max()
                .unwrap_or(0),
        )
        .max(1) as f64;

    root.fill(&WHITE)?;
    let body = root.titled(
        &campaign_title(results),
        ("sans-serif", TITLE_SIZE).into_font().color(&BLACK),
    )?;

    // Legend on the right, as wide as its longest label.
    let legend_font = TextStyle::from(("sans-serif", LABEL_SIZE).into_font());
    let text_width = spec
        .legend
        .iter()
        .map(|e| body.estimate_text_size(&e.label, &legend_font).map(|s| s.0))
        .try_fold(0, |a, w| w.map(|w| a.max(w)))?;
    let legend_width = (text_width + 70).min(WIDTH / 3);
    let (chart_area, legend_area) = body.split_horizontally(WIDTH - legend_width);

    let x_range = match spec.content {
        Content::Stacked(_) => -0.5..failures + 0.5,
        Content::Lines(_) => 0.0..failures,
    };
    let mut chart = ChartBuilder::on(&chart_area)
        .caption(&spec.caption, ("sans-serif", CAPTION_SIZE))
        .margin(12)
        .x_label_area_size(55)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, 0.0..spec.y_max)?;

    let integer = |v: &f64| {
        if v.fract() == 0.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.1}")
        }
    };
    let x_ticks = (failures as usize + 1).min(12);
    let y_ticks = if spec.percent {
        11
    } else {
        (spec.y_max as usize + 1).min(11)
    };
    chart
        .configure_mesh()
        .x_desc("failed nodes")
        .y_desc(spec.y_desc)
        .x_labels(x_ticks)
        .y_labels(y_ticks)
        .x_label_formatter(&|v| {
            if v.fract() == 0.0 {
                format!("{v:.0}")
            } else {
                String::new()
            }
        })
        .y_label_formatter(&integer)
        .label_style(("sans-serif", TICK_SIZE))
        .axis_desc_style(("sans-serif", LABEL_SIZE))
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.12))
        .draw()?;

    match &spec.content {
        Content::Lines(lines) => {
            for line in lines {
                let points = &line.points;
                let style = line.colour.stroke_width(line.width);
                match line.mark {
                    Mark::Dashed => {
                        chart.draw_series(DashedLineSeries::new(points.clone(), 12, 6, style))?;
                    }
                    Mark::Dotted => {
                        chart.draw_series(DashedLineSeries::new(points.clone(), 3, 5, style))?;
                    }
                    Mark::Solid | Mark::Fill => {
                        chart.draw_series(LineSeries::new(points.clone(), style))?;
                    }
                }
                // A single point draws no line: mark it.
                if points.len() == 1 || line.dots {
                    chart.draw_series(
                        points
                            .iter()
                            .map(|&p| Circle::new(p, 4, line.colour.filled())),
                    )?;
                }
            }
        }
        Content::Stacked(bars) => {
            let half = if bars.len() > 40 { 0.5 } else { 0.4 };
            for (x, bands) in bars {
                chart.draw_series(bands.iter().enumerate().filter(|(_, b)| b.1 > b.0).map(
                    |(k, &(lo, hi))| {
                        Rectangle::new([(x - half, lo), (x + half, hi)], degree_colour(k).filled())
                    },
                ))?;
            }
        }
    }

    draw_legend(&legend_area, &spec.legend, &legend_font)?;
    root.present()?;
    Ok(())
}

/// The legend: one row per entry, a sample of the line (or a filled box) and the label.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
    font: &TextStyle,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let row = LABEL_SIZE as i32 + 10;
    let top = 60;
    for (i, e) in entries.iter().enumerate() {
        let y = top + i as i32 * row;
        let (x0, x1) = (8, 48);
        match e.mark {
            Mark::Solid => {
                area.draw(&PathElement::new(
                    vec![(x0, y), (x1, y)],
                    e.colour.stroke_width(3),
                ))?;
            }
            Mark::Dashed | Mark::Dotted => {
                let (dash, gap) = if matches!(e.mark, Mark::Dashed) {
                    (10, 5)
                } else {
                    (3, 5)
                };
                let mut x = x0;
                while x < x1 {
                    let end = (x + dash).min(x1);
                    area.draw(&PathElement::new(
                        vec![(x, y), (end, y)],
                        e.colour.stroke_width(2),
                    ))?;
                    x = end + gap;
                }
            }
            Mark::Fill => {
                area.draw(&Rectangle::new(
                    [(x0 + 8, y - 8), (x1 - 8, y + 8)],
                    e.colour.filled(),
                ))?;
            }
        }
        if e.dots {
            area.draw(&Circle::new(((x0 + x1) / 2, y), 4, e.colour.filled()))?;
        }
        area.draw(&Text::new(
            e.label.clone(),
            (x1 + 10, y),
            font.pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use topology::simulate::{CampaignInfo, StepStats};

    fn step(failed: u32, cases: u64, histogram: Vec<u64>, selected: Vec<u64>) -> StepStats {
        let alive = histogram.iter().sum();
        let sum_collisions = histogram
            .iter()
            .enumerate()
            .map(|(c, &n)| c as u64 * n)
            .sum();
        StepStats {
            failed,
            cases,
            alive,
            histogram,
            sum_collisions,
            selected,
            lost: 0,
            ..StepStats::default()
        }
    }

    fn results() -> Results {
        let method = |name: &str, shift: u64| MethodResults {
            method: name.to_string(),
            steps: vec![
                step(0, 100, vec![0, 100], vec![]),
                step(1, 100, vec![0, 60, 40], vec![5, 30 + shift, 50, 15]),
                step(2, 100, vec![0, 20, 50, 20 + shift], vec![10, 20, 40, 25]),
                step(3, 100, vec![0, 0, 30, 40, 10], vec![20, 30, 20, 10]),
                step(4, 100, vec![], vec![]),
            ],
            worst: vec![],
            remapped: vec![],
        };
        Results {
            version: Results::VERSION,
            campaign: CampaignInfo {
                topology: None,
                spares: "3D(2,1)".into(),
                box_extents: vec![12, 12, 12],
                wrap: vec![true, true, true],
                compute: vec![10, 11, 11],
                pattern: "7p".into(),
                periodic: true,
                failures: 4,
                samples: 3_686_400,
                seed: 1,
                exhaustive: false,
                keep_worst: 0,
                keep_at: vec![],
                remap: None,
            },
            shards: vec![0],
            shard_count: 1,
            methods: vec![method("hybrid", 0), method("1D", 5)],
        }
    }

    const TITLE: &str = "12x12x12, 3D(2,1), 7p, 3,686,400 samples";

    fn png_size(bytes: &[u8]) -> (u32, u32) {
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
        assert_eq!(&bytes[12..16], b"IHDR");
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        (be(&bytes[16..20]), be(&bytes[20..24]))
    }

    #[test]
    fn every_figure_writes_svg_and_png() {
        let dir = tempfile::tempdir().unwrap();
        let r = results();
        for (figure, name) in [
            (Figure::Collisions, "collisions"),
            (Figure::Survival, "survival"),
            (Figure::Selection, "selection"),
            (Figure::CumulativeSelection, "cumulative"),
        ] {
            let paths = plot(&r, figure, None, &dir.path().join(format!("{name}.png"))).unwrap();
            assert_eq!(
                paths,
                vec![
                    dir.path().join(format!("{name}.svg")),
                    dir.path().join(format!("{name}.png"))
                ]
            );
            let svg = std::fs::read_to_string(&paths[0]).unwrap();
            let head = svg.trim_start();
            assert!(
                head.starts_with("<svg") || head.starts_with("<?xml"),
                "{name}"
            );
            assert!(svg.trim_end().ends_with("</svg>"), "{name}");
            assert!(svg.contains(TITLE), "{name}: no title in the SVG");
            let png = std::fs::read(&paths[1]).unwrap();
            assert_eq!(png_size(&png), (WIDTH, HEIGHT), "{name}");
        }
    }

    #[test]
    fn overlapping_survival_lines_stay_visible() {
        let r = results();
        let methods: Vec<&MethodResults> = r.methods.iter().collect();
        let Content::Lines(lines) = build(Figure::Survival, &methods).content else {
            panic!("survival is a line chart");
        };
        // Both methods survive the first steps (100 %): the first is drawn wider than the second.
        assert_eq!(lines[0].points[..2], lines[1].points[..2]);
        assert_eq!(lines[0].points[1].1, 100.0);
        assert!(
            lines[0].width > lines[1].width + 4,
            "widths {} {}",
            lines[0].width,
            lines[1].width
        );
    }

    #[test]
    fn legends_name_methods_and_degrees() {
        let dir = tempfile::tempdir().unwrap();
        let r = results();
        let svg = |figure, method| {
            let paths = plot(&r, figure, method, &dir.path().join("f")).unwrap();
            std::fs::read_to_string(&paths[0]).unwrap()
        };
        let c = svg(Figure::Collisions, None);
        for label in ["hybrid mean", "hybrid worst", "hybrid best", "1D mean"] {
            assert!(c.contains(label), "collisions legend lacks {label}");
        }
        let s = svg(Figure::Selection, Some("1D"));
        assert!(s.contains("Selection rate per degree, 1D"));
        for label in ["0D", "1D", "2D", "3D"] {
            assert!(
                s.lines().any(|l| l.trim() == label),
                "selection legend lacks {label}"
            );
        }
        assert!(svg(Figure::Survival, Some("hybrid")).contains("Survival rate"));
    }

    #[test]
    fn output_names() {
        let p = |s: &str| output_paths(Path::new(s));
        assert_eq!(p("a/fig.svg"), ("a/fig.svg".into(), "a/fig.png".into()));
        assert_eq!(p("a/fig.PNG"), ("a/fig.svg".into(), "a/fig.png".into()));
        assert_eq!(p("fig"), ("fig.svg".into(), "fig.png".into()));
        assert_eq!(p("run.v2"), ("run.v2.svg".into(), "run.v2.png".into()));
    }

    #[test]
    fn unknown_method_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = plot(
            &results(),
            Figure::Selection,
            Some("2D"),
            &dir.path().join("x.svg"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("no method '2D'"), "{err}");
        assert!(err.contains("hybrid, 1D"), "{err}");
        assert!(!dir.path().join("x.svg").exists());
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(3_686_400), "3,686,400");
    }
}
