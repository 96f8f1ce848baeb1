//! The rss benchmark's results on disk and its plot: each run writes its tier's figures to
//! `target/bench/rss-<nodes>x<pods>.json`, then draws `docs/src/img/rss.svg` from every such file
//! present (a hand-written SVG: a grouped bar chart of steady RSS per process, one group per
//! cluster, on a log scale).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Value, json};

/// One measured process of one run, as written to the result file.
pub struct ProcessResult {
    pub process: String,
    /// "empty" or "populated".
    pub cluster: String,
    pub steady_rss_mib: f64,
    pub peak_rss_mib: f64,
    pub cpu_sync_s: f64,
    pub ready_s: f64,
    pub cpu_next_15s: f64,
}

/// The directory of the result files.
pub fn results_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("bench")
}

/// Writes this tier's results; returns the file.
pub fn write_results(
    nodes: usize,
    pods: usize,
    pod_bytes: usize,
    rows: &[ProcessResult],
) -> Result<PathBuf> {
    let dir = results_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("rss-{nodes}x{pods}.json"));
    let processes: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "process": r.process,
                "cluster": r.cluster,
                "steady_rss_mib": round3(r.steady_rss_mib),
                "peak_rss_mib": round3(r.peak_rss_mib),
                "cpu_sync_s": round3(r.cpu_sync_s),
                "ready_s": round3(r.ready_s),
                "cpu_next_15s": round3(r.cpu_next_15s),
            })
        })
        .collect();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let doc = json!({
        "nodes": nodes,
        "pods": pods,
        "pod_bytes": pod_bytes,
        "unix_time": stamp,
        "processes": processes,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")?;
    Ok(path)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One group of bars: a cluster, and the steady (and peak) RSS of each series there.
struct Group {
    label: String,
    sublabel: String,
    /// A third line, where the tier's pods differ from the others'.
    note: Option<String>,
    /// Per series (in [`SERIES`] order): (steady, peak) MiB.
    values: Vec<Option<(f64, f64)>>,
}

/// The series drawn: (legend, the process labels that feed it, colour).
const SERIES: [(&str, &[&str], &str); 4] = [
    (
        "kube-remediator (streaming lists, its default)",
        &["kube-remediator", "kube-remediator, streaming lists"],
        "#2b7a3d",
    ),
    ("kube-remediator, paged lists", &["kube-remediator, paged lists"], "#8cc98f"),
    ("Go peer, tuned (transforms)", &["Go peer, tuned"], "#3a6ea5"),
    ("Go peer, naive (full objects)", &["Go peer, naive"], "#c0504d"),
];

fn series_of(process: &str) -> Option<usize> {
    SERIES.iter().position(|(_, labels, _)| labels.contains(&process))
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Reads every result file and draws the chart into `out`. Returns the files it used.
pub fn draw(out: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<(u64, u64, PathBuf, Value)> = Vec::new();
    for entry in std::fs::read_dir(results_dir())? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !(name.starts_with("rss-") && name.ends_with(".json")) {
            continue;
        }
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)
            .with_context(|| format!("reading {}", path.display()))?;
        let n = |k: &str| doc.get(k).and_then(Value::as_u64).unwrap_or_default();
        files.push((n("pods"), n("nodes"), path, doc));
    }
    files.sort_by_key(|(pods, nodes, _, _)| (*pods, *nodes));
    let values_of = |doc: &Value, cluster: &str| -> Vec<Option<(f64, f64)>> {
        let mut values = vec![None; SERIES.len()];
        for p in doc.get("processes").and_then(Value::as_array).into_iter().flatten() {
            let s = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default();
            let f = |k: &str| p.get(k).and_then(Value::as_f64).unwrap_or_default();
            if s("cluster") != cluster {
                continue;
            }
            if let Some(i) = series_of(s("process")) {
                values[i] = Some((f("steady_rss_mib"), f("peak_rss_mib")));
            }
        }
        values
    };
    let mut groups = Vec::new();
    // The empty cluster, from the smallest tier's run.
    if let Some((_, _, _, doc)) = files.first() {
        groups.push(Group {
            label: "empty cluster".into(),
            sublabel: "0 pods".into(),
            note: None,
            values: values_of(doc, "empty"),
        });
    }
    let bytes_of = |doc: &Value| doc.get("pod_bytes").and_then(Value::as_u64);
    let pod_bytes = files.first().and_then(|(_, _, _, d)| bytes_of(d));
    for (pods, nodes, _, doc) in &files {
        // A tier of smaller pods (`KUBE_REMEDIATOR_BENCH_POD=small`) says so under its bars.
        // (Running pods of one size differ by a few bytes from run to run.)
        let other = |b: u64| pod_bytes.is_some_and(|p| b.abs_diff(p) * 10 > p);
        let note =
            bytes_of(doc).filter(|b| other(*b)).map(|b| format!("pods of {} bytes", thousands(b)));
        groups.push(Group {
            label: format!("{} pods", thousands(*pods)),
            sublabel: format!("on {} nodes", thousands(*nodes)),
            note,
            values: values_of(doc, "populated"),
        });
    }
    std::fs::create_dir_all(out.parent().context("no parent")?)?;
    std::fs::write(out, svg(&groups, pod_bytes))?;
    Ok(files.into_iter().map(|(_, _, p, _)| p).collect())
}

fn svg(groups: &[Group], pod_bytes: Option<u64>) -> String {
    let (width, height) = (960.0, 540.0);
    let (left, right, top, bottom) = (80.0, 20.0, 60.0, 150.0);
    let plot_w = width - left - right;
    let plot_h = height - top - bottom;
    let max = groups
        .iter()
        .flat_map(|g| g.values.iter().flatten().map(|(s, _)| *s))
        .fold(10.0_f64, f64::max);
    // Log scale from 1 MiB to the next power of ten above the largest value.
    let lo = 0.0;
    let hi = (max * 1.2).log10().ceil().max(2.0);
    let y = |mib: f64| top + plot_h * (1.0 - (mib.max(1.0).log10() - lo) / (hi - lo));
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let title = "Steady RSS after sync, 15 s after ready (cargo bench --bench rss)";
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="16" font-weight="bold">{title}</text>"#,
        width / 2.0
    );
    let sub = match pod_bytes {
        Some(b) => format!(
            "each process alone on the same control plane, same run per cluster; a Running pod weighs {} bytes of JSON unless noted",
            thousands(b)
        ),
        None => "each process alone on the same control plane, same run per cluster".into(),
    };
    let _ = writeln!(
        s,
        r#"<text x="{}" y="42" text-anchor="middle" fill="dimgray">{sub}</text>"#,
        width / 2.0
    );
    // Grid and y axis: 1-2-5 ticks.
    let mut decade = 1.0_f64;
    while decade.log10() <= hi + 1e-9 {
        for m in [1.0, 2.0, 5.0] {
            let v = decade * m;
            if v.log10() > hi + 1e-9 {
                continue;
            }
            let yy = y(v);
            let stroke = if m == 1.0 { "#bbb" } else { "#e5e5e5" };
            let _ = writeln!(
                s,
                r#"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="{stroke}"/>"#,
                left + plot_w
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
                left - 6.0,
                yy + 4.0,
                thousands(v as u64)
            );
        }
        decade *= 10.0;
    }
    let _ = writeln!(
        s,
        r#"<line x1="{left}" x2="{left}" y1="{top}" y2="{}" stroke="black"/>"#,
        top + plot_h
    );
    let _ = writeln!(
        s,
        r#"<line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="black"/>"#,
        left + plot_w,
        top + plot_h,
        top + plot_h
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(22,{}) rotate(-90)" text-anchor="middle">steady RSS, MiB (log scale)</text>"#,
        top + plot_h / 2.0
    );
    // Bars.
    let group_w = plot_w / groups.len().max(1) as f64;
    let bar_w = (group_w * 0.8 / SERIES.len() as f64).min(60.0);
    for (gi, g) in groups.iter().enumerate() {
        let gx = left + group_w * gi as f64;
        let drawn: Vec<(usize, (f64, f64))> =
            g.values.iter().enumerate().filter_map(|(i, v)| v.map(|v| (i, v))).collect();
        let x0 = gx + (group_w - bar_w * drawn.len() as f64) / 2.0;
        for (k, (si, (steady, peak))) in drawn.iter().enumerate() {
            let x = x0 + bar_w * k as f64;
            let yy = y(*steady);
            let colour = SERIES[*si].2;
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{yy:.1}" width="{:.1}" height="{:.1}" fill="{colour}"><title>{}: steady {steady:.1} MiB, peak {peak:.1} MiB</title></rect>"#,
                x + 2.0,
                bar_w - 4.0,
                top + plot_h - yy,
                SERIES[*si].0
            );
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{}</text>"#,
                x + bar_w / 2.0,
                yy - 4.0,
                format_mib(*steady)
            );
        }
        let cx = gx + group_w / 2.0;
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{}</text>"#,
            top + plot_h + 18.0,
            g.label
        );
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="dimgray">{}</text>"#,
            top + plot_h + 33.0,
            g.sublabel
        );
        if let Some(note) = &g.note {
            let _ = writeln!(
                s,
                r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="dimgray">{note}</text>"#,
                top + plot_h + 48.0,
            );
        }
    }
    // Legend.
    let ly = top + plot_h + 72.0;
    for (i, (label, _, colour)) in SERIES.iter().enumerate() {
        let (col, row) = (i % 2, i / 2);
        let x = left + col as f64 * 420.0;
        let yy = ly + row as f64 * 20.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{:.1}" width="14" height="14" fill="{colour}"/>"#,
            yy - 11.0
        );
        let _ = writeln!(s, r#"<text x="{:.1}" y="{yy:.1}">{label}</text>"#, x + 20.0);
    }
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="{:.1}" fill="dimgray">Values in MiB (VmRSS). Go peer: controller-runtime, one informer per kind kube-remediator watches; see docs/src/operations/benchmarks.md.</text>"#,
        ly + 52.0
    );
    s.push_str("</svg>\n");
    s
}

fn format_mib(v: f64) -> String {
    if v >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") }
}
