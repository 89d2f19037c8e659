//! The PNG of `hecloud bench tfhe`: log2 seconds vs n (sums) and vs width
//! (comparisons), ours vs TFHE-rs vs the published 2019 TFHE points.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

use super::{PUBLISHED_TFHE_CMP1024_LOG2_S, PUBLISHED_TFHE_SUM3_32_S, Row};

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSansMono.ttf");

/// Registers the embedded font as `sans-serif` (once).
pub(crate) fn register() -> Result<(), String> {
    static ONCE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "invalid font".to_string())
    })
    .clone()
}

/// A chart of log2 seconds against `x_label`, its axes spanning `points`
/// with a margin, its mesh drawn (the layout of every `bench` plot).
pub(crate) fn log2_seconds_axes<'a, 'b>(
    area: &'a DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    points: impl Iterator<Item = (f64, f64)>,
) -> Result<
    ChartContext<
        'a,
        BitMapBackend<'b>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    Box<dyn std::error::Error>,
> {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(
            (x0 - 0.3)..(x1 + 0.3),
            (y0 - 0.5).floor()..(y1 + 0.5).ceil(),
        )?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc("log2(seconds)")
        .draw()?;
    Ok(chart)
}

type Series = (String, RGBColor, Vec<(f64, f64)>);

fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    series: &[Series],
    points: &[(String, RGBColor, (f64, f64))],
    legend: SeriesLabelPosition,
) -> Result<(), Box<dyn std::error::Error>> {
    let all = series
        .iter()
        .flat_map(|s| s.2.iter().copied())
        .chain(points.iter().map(|p| p.2));
    let mut chart = log2_seconds_axes(area, title, x_label, all)?;
    for (name, color, pts) in series {
        let c = *color;
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    }
    for (name, color, p) in points {
        let c = *color;
        chart
            .draw_series(std::iter::once(TriangleMarker::new(*p, 7, c.filled())))?
            .label(name.as_str())
            .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 6, c.filled()));
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Draws `rows` into `path`.
pub fn draw(path: &Path, rows: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
    register()?;
    let root = BitMapBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(700);
    let l2 = |x: f64| x.log2();
    let pick =
        |op: &str, w: Option<usize>, f: fn(&Row) -> f64, x: fn(&Row) -> f64| -> Vec<(f64, f64)> {
            rows.iter()
                .filter(|r| r.op == op && w.is_none_or(|w| r.width == w) && f(r).is_finite())
                .map(|r| (l2(x(r)), l2(f(r))))
                .collect()
        };
    let sums = [
        (
            "ours 32-bit".to_string(),
            BLUE,
            pick("sum", Some(32), |r| r.ours_s, |r| r.n as f64),
        ),
        (
            "TFHE-rs 32-bit".to_string(),
            RED,
            pick("sum", Some(32), |r| r.tfhers_s, |r| r.n as f64),
        ),
        (
            "ours 64-bit".to_string(),
            CYAN,
            pick("sum", Some(64), |r| r.ours_s, |r| r.n as f64),
        ),
        (
            "TFHE-rs 64-bit".to_string(),
            MAGENTA,
            pick("sum", Some(64), |r| r.tfhers_s, |r| r.n as f64),
        ),
    ];
    panel(
        &left,
        "sum of n encrypted integers",
        "log2(n)",
        &sums,
        &[(
            "TFHE 2019, 32-bit".to_string(),
            BLACK,
            (l2(3.0), l2(PUBLISHED_TFHE_SUM3_32_S)),
        )],
        SeriesLabelPosition::UpperRight,
    )?;
    let cmps = [
        (
            "ours (tree)".to_string(),
            BLUE,
            pick("cmp", None, |r| r.ours_s, |r| r.width as f64),
        ),
        (
            "ours (carry of ~X+Y)".to_string(),
            GREEN,
            pick("cmp", None, |r| r.published_s, |r| r.width as f64),
        ),
        (
            "TFHE-rs gt".to_string(),
            RED,
            pick("cmp", None, |r| r.tfhers_s, |r| r.width as f64),
        ),
    ];
    panel(
        &right,
        "comparison of two encrypted integers",
        "log2(width in bits)",
        &cmps,
        &[(
            "TFHE 2019".to_string(),
            BLACK,
            (10.0, PUBLISHED_TFHE_CMP1024_LOG2_S),
        )],
        SeriesLabelPosition::UpperLeft,
    )?;
    root.present()?;
    Ok(())
}
