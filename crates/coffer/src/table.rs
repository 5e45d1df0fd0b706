//! Tables in human output: each column as wide as its widest cell (header
//! included), columns two spaces apart, no borders, so that long host names,
//! tags or key names never push a row out of line. Every table the binary prints
//! goes through [`Table`].

use comfy_table::{CellAlignment, TableStyle};

/// Spaces between two columns.
const GAP: u16 = 2;

/// A table of text cells under a header row.
pub struct Table {
    inner: comfy_table::Table,
}

impl Table {
    /// A table with these column headers and no rows yet.
    pub fn new(header: &[&str]) -> Table {
        let mut inner = comfy_table::Table::new();
        inner.load_style(TableStyle::new());
        inner.set_header(header.to_vec());
        let mut t = Table { inner };
        t.pad(GAP);
        t
    }

    /// Aligns the columns in `cols` (counted from 0) to the right, header included.
    pub fn right(mut self, cols: impl IntoIterator<Item = usize>) -> Table {
        for i in cols {
            if let Some(c) = self.inner.column_mut(i) {
                c.set_cell_alignment(CellAlignment::Right);
            }
        }
        self
    }

    /// Draws a line of dashes under the header, as long as the table is wide.
    pub fn ruled(mut self) -> Table {
        // The rule's junctions take one column of each gap: rows show a space there.
        let rule = comfy_table::LineStyle::none().fill('-').junction('-');
        let rows = comfy_table::ContentLineStyle::none().junction(' ');
        self.inner.load_style(TableStyle::new().header_separator(rule).header_lines(rows).content_lines(rows));
        self.pad(GAP - 1);
        self
    }

    /// Puts `n` spaces after every column but the last.
    fn pad(&mut self, n: u16) {
        let last = self.inner.column_count().saturating_sub(1);
        for c in self.inner.column_iter_mut() {
            c.set_padding((0, if c.index == last { 0 } else { n }));
        }
    }

    /// Adds a row; it should have one cell per column.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.inner.add_row(cells.into_iter().map(Into::into).collect::<Vec<String>>());
    }

    /// The table as text, one line per row, each ending in a newline and none
    /// ending in spaces.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in self.inner.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table to stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn columns_take_the_width_of_their_widest_cell() {
        let mut t = Table::new(&["id", "host", "size"]).right([2]);
        t.row(["1a2b", "a-very-long-hostname.example.com", "10 B"]);
        t.row(["3c4d", "h", "1.50 KiB"]);
        assert_eq!(
            t.render(),
            "id    host                                  size\n\
             1a2b  a-very-long-hostname.example.com      10 B\n\
             3c4d  h                                 1.50 KiB\n"
        );
    }

    #[test]
    fn a_ruled_table_has_dashes_under_its_header() {
        let mut t = Table::new(&["op", "n"]).ruled();
        t.row(["list", "3"]);
        assert_eq!(t.render(), "op    n\n-------\nlist  3\n");
    }

    #[test]
    fn a_table_without_rows_is_its_header() {
        assert_eq!(Table::new(&["id", "time"]).render(), "id  time\n");
    }
}
