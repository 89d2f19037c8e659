//! Shared output conventions of every `hecloud bench` experiment: a readable
//! table on stdout, `DIR/<experiment>.csv`, and one closing
//! `RESULT <experiment> key=value …` line with the headline figures.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Human-readable bytes (binary units).
///
/// ```
/// assert_eq!(hecloud_bench::report::bytes(1536), "1.5 KiB");
/// ```
pub fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// A table of results: one header row and any number of data rows.
#[derive(Debug, Clone)]
pub struct Table {
    experiment: String,
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table for `experiment` with the given column names.
    ///
    /// ```
    /// let mut t = hecloud_bench::report::Table::new("ntt", &["n", "us"]);
    /// t.push(vec!["4096".into(), "12.5".into()]);
    /// assert!(t.render().contains("4096"));
    /// ```
    pub fn new(experiment: &str, columns: &[&str]) -> Self {
        Self {
            experiment: experiment.to_owned(),
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; it must have one cell per column.
    pub fn push(&mut self, row: Vec<String>) {
        assert_eq!(row.len(), self.columns.len(), "row width != column count");
        self.rows.push(row);
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> &[Vec<String>] {
        &self.rows
    }

    /// Renders the table with aligned columns.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(String::len).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                let sep = if i == 0 { "" } else { "  " };
                let _ = write!(out, "{sep}{cell:>w$}");
            }
            out.push('\n');
        };
        line(&mut out, &self.columns);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(&mut out, &rule);
        for row in &self.rows {
            line(&mut out, row);
        }
        out
    }

    /// CSV text (header + rows); cells containing a comma or quote are quoted.
    pub fn to_csv(&self) -> String {
        let esc = |c: &String| {
            if c.contains([',', '"', '\n']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.clone()
            }
        };
        let mut out = String::new();
        for row in std::iter::once(&self.columns).chain(&self.rows) {
            let cells: Vec<String> = row.iter().map(esc).collect();
            out.push_str(&cells.join(","));
            out.push('\n');
        }
        out
    }

    /// Writes `dir/<experiment>.csv`, creating `dir` if needed, and returns the path.
    pub fn write_csv(&self, dir: &Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}.csv", self.experiment));
        std::fs::write(&path, self.to_csv())?;
        Ok(path)
    }
}

/// The closing `RESULT <experiment> key=value …` line of an experiment.
#[derive(Debug, Clone)]
pub struct ResultLine {
    experiment: String,
    pairs: Vec<(String, String)>,
}

impl ResultLine {
    /// An empty result line for `experiment`.
    ///
    /// ```
    /// let mut r = hecloud_bench::report::ResultLine::new("ntt");
    /// r.push("n", 65536);
    /// r.push_f64("ours_us", 512.345, 1);
    /// assert_eq!(r.to_string(), "RESULT ntt n=65536 ours_us=512.3");
    /// ```
    pub fn new(experiment: &str) -> Self {
        Self {
            experiment: experiment.to_owned(),
            pairs: Vec::new(),
        }
    }

    /// Adds `key=value`.
    pub fn push(&mut self, key: &str, value: impl std::fmt::Display) {
        self.pairs.push((key.to_owned(), value.to_string()));
    }

    /// Adds `key=value` with `decimals` digits after the point; a value that
    /// is not finite (a peer that could not run) is written `NA`.
    pub fn push_f64(&mut self, key: &str, value: f64, decimals: usize) {
        if value.is_finite() {
            self.push(key, format!("{value:.decimals$}"));
        } else {
            self.push(key, "NA");
        }
    }
}

impl std::fmt::Display for ResultLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RESULT {}", self.experiment)?;
        for (k, v) in &self.pairs {
            write!(f, " {k}={v}")?;
        }
        Ok(())
    }
}

/// The CPU's model name (from `/proc/cpuinfo`; "unknown CPU" elsewhere),
/// to name beside every figure.
pub fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Options every experiment receives from `hecloud bench`.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Run the short version (a few minutes at most), still printing every headline key.
    pub quick: bool,
    /// Folder for CSV and plot files.
    pub out_dir: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_cells_with_commas() {
        let mut t = Table::new("x", &["a", "b"]);
        t.push(vec!["1,2".into(), "say \"hi\"".into()]);
        assert_eq!(t.to_csv(), "a,b\n\"1,2\",\"say \"\"hi\"\"\"\n");
    }

    #[test]
    fn non_finite_values_are_na() {
        let mut r = ResultLine::new("e");
        r.push_f64("x", f64::NAN, 2);
        r.push_f64("y", 1.0 / 3.0, 2);
        assert_eq!(r.to_string(), "RESULT e x=NA y=0.33");
    }
}
