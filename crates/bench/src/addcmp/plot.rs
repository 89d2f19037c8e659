//! The PNGs of `hecloud bench addcmp`, on the axes of the paper's figures
//! 8 and 18 (log2 of seconds): `addcmp-sums.png` (vs log2 n) and
//! `addcmp-cmp.png` (vs log2 of the width). Measured series are solid
//! lines with dots, the paper's points dashed lines with triangles, the
//! paper's cost model dotted.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::{Op, Row, Source, system};

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Measured,
    Paper,
    Model,
}

struct Series {
    name: String,
    color: RGBColor,
    style: Style,
    points: Vec<(f64, f64)>,
}

const ORANGE: RGBColor = RGBColor(230, 120, 0);
const GREEN_D: RGBColor = RGBColor(0, 140, 60);
const PURPLE: RGBColor = RGBColor(130, 50, 170);
const NAVY: RGBColor = RGBColor(20, 40, 140);
const GREY: RGBColor = RGBColor(110, 110, 110);
const BROWN: RGBColor = RGBColor(140, 80, 30);
const PINK: RGBColor = RGBColor(220, 60, 140);
const TEAL: RGBColor = RGBColor(0, 150, 150);
const OLIVE: RGBColor = RGBColor(128, 128, 0);

/// The series of `rows` from `source`/`system`/`op` at `bits` (any when
/// None), as (log2 x, log2 seconds) with x the width (comparisons) or n.
fn pick(
    rows: &[Row],
    source: Source,
    system: &str,
    op: Op,
    bits: Option<usize>,
) -> Vec<(f64, f64)> {
    let amortized = system == system::OURS_SLICED;
    let mut pts: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| {
            r.source == source
                && r.system == system
                && r.op == op
                && (bits.is_none() || r.bits == bits)
                && r.seconds.is_finite()
                && r.seconds > 0.0
        })
        .map(|r| {
            let x = if op == Op::Cmp {
                r.bits.unwrap_or(0)
            } else {
                r.n
            };
            // A bit-sliced run does many sums or comparisons at once: its
            // time per instance (numbers / n of them).
            let s = if amortized && r.numbers > 0 {
                r.seconds * r.n.max(1) as f64 / r.numbers as f64
            } else {
                r.seconds
            };
            let s = if amortized && op == Op::Cmp {
                r.seconds / r.numbers.max(1) as f64
            } else {
                s
            };
            ((x as f64).log2(), s.log2())
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

fn series(
    rows: &[Row],
    name: &str,
    color: RGBColor,
    style: Style,
    (source, system, op, bits): (Source, &str, Op, Option<usize>),
) -> Series {
    Series {
        name: name.into(),
        color,
        style,
        points: pick(rows, source, system, op, bits),
    }
}

fn sum_series(rows: &[Row]) -> Vec<Series> {
    use Source::{Measured, Paper, PaperModel};
    use Style as S;
    let m = |system, bits| (Measured, system, Op::Sum, bits);
    vec![
        series(
            rows,
            "ours BGV integer SIMD, 32-bit (N=8192)",
            BLUE,
            S::Measured,
            m(system::OURS_INT, Some(32)),
        ),
        series(
            rows,
            "ours BGV integer SIMD, 64-bit (N=8192)",
            CYAN,
            S::Measured,
            m(system::OURS_INT, Some(64)),
        ),
        series(
            rows,
            "Lattigo BGV, t=65537 (N=8192)",
            ORANGE,
            S::Measured,
            m(system::LATTIGO, None),
        ),
        series(
            rows,
            "SEAL BFV, t=65537 (N=8192)",
            GREEN_D,
            S::Measured,
            m(system::SEAL, None),
        ),
        series(
            rows,
            "ours BGV packed bits in slots, 64-bit (N=8192)",
            TEAL,
            S::Measured,
            m(system::OURS_PACKED, Some(64)),
        ),
        series(
            rows,
            "ours BGV bit-sliced, 32-bit, per sum of 8192",
            OLIVE,
            S::Measured,
            m(system::OURS_SLICED, Some(32)),
        ),
        series(
            rows,
            "ours TFHE, 32-bit",
            NAVY,
            S::Measured,
            m(system::OURS_TFHE, Some(32)),
        ),
        series(
            rows,
            "ours TFHE, 64-bit",
            PURPLE,
            S::Measured,
            m(system::OURS_TFHE, Some(64)),
        ),
        series(
            rows,
            "TFHE-rs, 32-bit",
            RED,
            S::Measured,
            m(system::TFHERS, Some(32)),
        ),
        series(
            rows,
            "TFHE-rs, 64-bit",
            PINK,
            S::Measured,
            m(system::TFHERS, Some(64)),
        ),
        series(
            rows,
            "paper fig. 8: TFHE 64-bit",
            BLACK,
            S::Paper,
            (Paper, system::TFHE, Op::Sum, Some(64)),
        ),
        series(
            rows,
            "paper fig. 8: HElib 64-bit",
            GREY,
            S::Paper,
            (Paper, system::HELIB, Op::Sum, Some(64)),
        ),
        series(
            rows,
            "paper: SEAL (N=2048, t=2^8)",
            BROWN,
            S::Paper,
            (Paper, system::PAPER_SEAL, Op::Sum, None),
        ),
        series(
            rows,
            "paper model (fig. 6): TFHE 32-bit",
            BLACK,
            S::Model,
            (PaperModel, system::TFHE, Op::Sum, Some(32)),
        ),
        series(
            rows,
            "paper model (fig. 6): HElib 32-bit",
            GREY,
            S::Model,
            (PaperModel, system::HELIB, Op::Sum, Some(32)),
        ),
    ]
}

fn cmp_series(rows: &[Row]) -> Vec<Series> {
    use Source::{Measured, Paper};
    use Style as S;
    let m = |system| (Measured, system, Op::Cmp, None);
    vec![
        series(
            rows,
            "ours TFHE (comparison tree)",
            BLUE,
            S::Measured,
            m(system::OURS_TFHE),
        ),
        series(
            rows,
            "ours TFHE (paper's carry of ~X+Y)",
            GREEN_D,
            S::Measured,
            m(system::OURS_TFHE_PAPER_METHOD),
        ),
        series(rows, "TFHE-rs gt", RED, S::Measured, m(system::TFHERS)),
        series(
            rows,
            "ours BGV packed bits in slots (N=8192)",
            TEAL,
            S::Measured,
            m(system::OURS_PACKED),
        ),
        series(
            rows,
            "ours BGV bit-sliced, per comparison of 8192",
            OLIVE,
            S::Measured,
            m(system::OURS_SLICED),
        ),
        series(
            rows,
            "paper fig. 18: TFHE",
            BLACK,
            S::Paper,
            (Paper, system::TFHE, Op::Cmp, None),
        ),
        series(
            rows,
            "paper fig. 18: HElib",
            GREY,
            S::Paper,
            (Paper, system::HELIB, Op::Cmp, None),
        ),
    ]
}

/// Legend notes: whose machine each figure is from.
fn machines() -> Vec<String> {
    vec![
        "paper (Paper A, 2019): Intel i7-6700 3.4 GHz".into(),
        format!("ours: {}", crate::report::cpu_name()),
    ]
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

fn legend(
    area: &Area<'_>,
    series: &[Series],
    notes: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let font = ("sans-serif", 14).into_font();
    let mut y = 40;
    for s in series.iter().filter(|s| !s.points.is_empty()) {
        let c = s.color;
        match s.style {
            Style::Measured => {
                area.draw(&PathElement::new(vec![(10, y), (50, y)], c.stroke_width(2)))?;
                area.draw(&Circle::new((30, y), 3, c.filled()))?;
            }
            Style::Paper => {
                for x in [10, 26, 42] {
                    area.draw(&PathElement::new(
                        vec![(x, y), (x + 9, y)],
                        c.stroke_width(2),
                    ))?;
                }
                area.draw(&TriangleMarker::new((30, y), 6, c.filled()))?;
            }
            Style::Model => {
                for x in (10..50).step_by(6) {
                    area.draw(&PathElement::new(
                        vec![(x, y), (x + 2, y)],
                        c.stroke_width(2),
                    ))?;
                }
            }
        }
        area.draw(&Text::new(s.name.clone(), (60, y - 8), font.clone()))?;
        y += 24;
    }
    for n in notes {
        area.draw(&Text::new(
            n.clone(),
            (10, y - 8),
            font.clone().color(&GREY),
        ))?;
        y += 24;
    }
    Ok(())
}

fn chart(
    area: &Area<'_>,
    title: &str,
    x_label: &str,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error>> {
    let points = series.iter().flat_map(|s| s.points.iter().copied());
    let mut chart = crate::tfhe::plot::log2_seconds_axes(area, title, x_label, points)?;
    for s in series {
        let c = s.color;
        let pts = s.points.clone();
        match s.style {
            Style::Measured => {
                chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?;
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
            }
            Style::Paper => {
                chart.draw_series(DashedLineSeries::new(pts.clone(), 8, 5, c.stroke_width(2)))?;
                chart.draw_series(pts.iter().map(|&p| TriangleMarker::new(p, 6, c.filled())))?;
            }
            Style::Model => {
                chart.draw_series(DashedLineSeries::new(pts, 2, 5, c.stroke_width(2)))?;
            }
        }
    }
    Ok(())
}

fn draw_one(
    path: &Path,
    title: &str,
    x_label: &str,
    series: &[Series],
    notes: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    crate::tfhe::plot::register()?;
    let root = BitMapBackend::new(path, (1300, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(880);
    chart(&left, title, x_label, series)?;
    legend(&right, series, notes)?;
    root.present()?;
    Ok(())
}

/// One PNG: its file name, title, x axis, series and notes.
struct Plot {
    file: &'static str,
    title: &'static str,
    x_label: &'static str,
    series: Vec<Series>,
    notes: Vec<String>,
}

/// Writes `dir/addcmp-sums.png` and `dir/addcmp-cmp.png`; returns each
/// plot's name and path, or why it was not written.
pub fn draw(dir: &Path, rows: &[Row]) -> Vec<(&'static str, Result<PathBuf, String>)> {
    let plots = [
        Plot {
            file: "addcmp-sums.png",
            title: "sum of n encrypted integers (paper's fig. 8 axes)",
            x_label: "log2(n)",
            series: sum_series(rows),
            notes: machines(),
        },
        Plot {
            file: "addcmp-cmp.png",
            title: "comparison of two encrypted integers (paper's fig. 18 axes)",
            x_label: "log2(width in bits)",
            series: cmp_series(rows),
            notes: machines(),
        },
    ];
    if let Err(e) = std::fs::create_dir_all(dir) {
        return plots
            .iter()
            .map(|p| (p.file, Err(format!("cannot create {}: {e}", dir.display()))))
            .collect();
    }
    plots
        .into_iter()
        .map(|p| {
            let path = dir.join(p.file);
            let res = draw_one(&path, p.title, p.x_label, &p.series, &p.notes)
                .map(|()| path)
                .map_err(|e| e.to_string());
            (p.file, res)
        })
        .collect()
}
