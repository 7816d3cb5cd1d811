//! A table as `kubectl get` prints one: a header row, columns aligned by the widest cell
//! (two spaces between them, none after the last), the same on a terminal and through a
//! pipe. A row may carry lines of its own below it (a GPU's reasons), which take no part in
//! the alignment. Colour, where it is wanted, wraps a cell after its width is measured.

use super::colour::Paint;

/// Spaces between two columns.
const GAP: usize = 2;

/// One cell: its text and, where it is a state word, its colour.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    text: String,
    paint: Option<Paint>,
}

impl Cell {
    /// A plain cell.
    pub fn plain(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            paint: None,
        }
    }

    /// A cell painted `paint` where colour is wanted.
    pub fn painted(text: impl Into<String>, paint: Paint) -> Self {
        Self {
            text: text.into(),
            paint: Some(paint),
        }
    }
}

/// A table being built.
#[derive(Debug, Clone, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<(Vec<Cell>, Vec<String>)>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|&h| h.to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; `below` are whole lines printed under it as they are.
    pub fn row(&mut self, cells: Vec<Cell>, below: Vec<String>) {
        self.rows.push((cells, below));
    }

    /// The table as text, each line ending in a newline; `colour` paints the cells that have
    /// a colour.
    pub fn render(&self, colour: bool) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| width(h)).collect();
        for (cells, _) in &self.rows {
            for (i, c) in cells.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(width(&c.text));
            }
        }
        let mut out = String::new();
        let header: Vec<Cell> = self.header.iter().map(Cell::plain).collect();
        line(&mut out, &header, &widths, false);
        for (cells, below) in &self.rows {
            line(&mut out, cells, &widths, colour);
            for l in below {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

/// How many columns `text` takes: one per character (names are escaped before they get here,
/// and `°` is one column).
fn width(text: &str) -> usize {
    text.chars().count()
}

fn line(out: &mut String, cells: &[Cell], widths: &[usize], colour: bool) {
    let last = cells.len().min(widths.len()).saturating_sub(1);
    for (i, c) in cells.iter().enumerate().take(widths.len()) {
        let text = match (colour, c.paint) {
            (true, Some(p)) => p.apply(&c.text),
            _ => c.text.clone(),
        };
        out.push_str(&text);
        if i < last {
            let pad = widths[i] - width(&c.text) + GAP;
            out.push_str(&" ".repeat(pad));
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell_with_no_trailing_space() {
        let mut t = Table::new(&["GPU", "NAME", "STATE"]);
        t.row(
            vec![
                Cell::plain("0"),
                Cell::plain("H100"),
                Cell::plain("HEALTHY"),
            ],
            vec![],
        );
        t.row(
            vec![
                Cell::plain("10"),
                Cell::plain("A100-SXM4"),
                Cell::painted("UNHEALTHY", Paint::Red),
            ],
            vec!["    Xid79: fell off -> reboot the node".into()],
        );
        assert_eq!(
            t.render(false),
            "GPU  NAME       STATE\n\
             0    H100       HEALTHY\n\
             10   A100-SXM4  UNHEALTHY\n    Xid79: fell off -> reboot the node\n"
        );
    }

    // The colour codes must not count as width: a painted column stays aligned.
    #[test]
    fn a_painted_cell_keeps_the_columns_after_it_aligned() {
        let mut t = Table::new(&["STATE", "TEMP"]);
        t.row(
            vec![Cell::painted("OK", Paint::Green), Cell::plain("58 °C")],
            vec![],
        );
        t.row(vec![Cell::plain("UNKNOWN"), Cell::plain("-")], vec![]);
        let text = t.render(true);
        assert_eq!(
            text,
            "STATE    TEMP\n\x1b[32mOK\x1b[0m       58 °C\nUNKNOWN  -\n"
        );
    }
}
