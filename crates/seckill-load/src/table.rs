//! A plain-text table, as the bench and `seckill-check` print their rows: a header, a rule,
//! the label left-aligned and the figures right-aligned, each column as wide as its widest
//! cell.

use std::fmt::Write;

/// `header` and `rows` as a table, a line each: the first column and those in `left`
/// left-aligned, the others right-aligned, with no spaces at a line's end. A row with fewer
/// cells than the header leaves the rest blank; cells past the header's are left out.
pub fn table(header: &[&str], rows: &[Vec<String>], left: &[usize]) -> String {
    let width = |cell: &str| cell.chars().count();
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .filter_map(|row| row.get(c))
                .map(|cell| width(cell))
                .chain([width(header[c])])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        for (c, w) in widths.iter().enumerate() {
            let cell = cells.next().unwrap_or("");
            let gap = if c == 0 { "" } else { "  " };
            let _ = if c == 0 || left.contains(&c) {
                write!(out, "{gap}{cell:<w$}")
            } else {
                write!(out, "{gap}{cell:>w$}")
            };
        }
        out.truncate(out.trim_end_matches(' ').len());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    line(&mut rule.iter().map(String::as_str));
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_label_left_figures_right() {
        let rows = vec![
            vec!["lua".to_owned(), "100".to_owned()],
            vec!["watchdog 看门狗".to_owned(), "7".to_owned()],
        ];
        let text = table(&["variant", "sold"], &rows, &[]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "variant       sold",
                "------------  ----",
                "lua            100",
                "watchdog 看门狗     7",
            ]
        );
        let notes = vec![vec!["lua".to_owned(), "7".to_owned(), "ok".to_owned()]];
        let text = table(&["variant", "sold", "note"], &notes, &[2]);
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [
                "variant  sold  note",
                "-------  ----  ----",
                "lua         7  ok"
            ],
            "a left-aligned last column leaves no spaces at the end"
        );
    }
}
