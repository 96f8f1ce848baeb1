//! Plain-text tables and durations for the commands' human output.

/// Left-aligned columns separated by two spaces.
pub struct Table<const N: usize> {
    header: [&'static str; N],
    rows: Vec<[String; N]>,
}

impl<const N: usize> Table<N> {
    pub fn new(header: [&'static str; N]) -> Self {
        Table { header, rows: Vec::new() }
    }

    pub fn row(&mut self, row: [String; N]) {
        self.rows.push(row);
    }

    /// Renders the table, each line starting with `indent`.
    pub fn render(&self, indent: &str) -> String {
        let mut widths = self.header.map(str::len);
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<&str>| {
            let parts: Vec<String> =
                cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
            format!("{indent}{}\n", parts.join("  ").trim_end())
        };
        let mut out = line(self.header.to_vec());
        for row in &self.rows {
            out.push_str(&line(row.iter().map(String::as_str).collect()));
        }
        out
    }

    /// Prints the table unless it has no rows.
    pub fn print_if_any(&self, indent: &str) {
        if !self.rows.is_empty() {
            self.print(indent);
        }
    }

    pub fn print(&self, indent: &str) {
        print!("{}", self.render(indent));
    }
}

/// `95s` -> `1m35s`, `7260s` -> `2h1m`; negative durations read as `0s`.
pub fn human(d: jiff::SignedDuration) -> String {
    let s = d.as_secs().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        _ => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;

    #[test]
    fn human_durations() {
        for (secs, want) in [(0, "0s"), (59, "59s"), (95, "1m35s"), (7260, "2h1m"), (-3, "0s")] {
            assert_eq!(human(SignedDuration::from_secs(secs)), want);
        }
    }

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(["NAME", "STATE"]);
        t.row(["a-long-name".into(), "Dead".into()]);
        t.row(["b".into(), "Healthy".into()]);
        assert_eq!(
            t.render("  "),
            "  NAME         STATE\n  a-long-name  Dead\n  b            Healthy\n"
        );
    }
}
