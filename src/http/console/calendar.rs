//! A table's partitions as a calendar (pure code: partitions in, markup
//! out; `chart` draws the same cells).
//!
//! The window is a year of days (a column a week, a row a weekday), a week
//! of hours (a row a day, a column an hour), or ten years of months (a row
//! a year). A cell is shaded by its row count against the window's
//! largest; outlined when its count moved more than the threshold against
//! the same weekday a week before (the same hour a week before; the same
//! month a year before); marked missing when no partition exists
//! between the table's first and last; and expired when its period is past
//! the table's retention (dropped, or never written, and refused now).

use std::collections::HashMap;

use chrono::{Datelike, Duration, Months, NaiveDate, NaiveDateTime, NaiveTime};
use maud::{html, Markup};

use super::text::{grouped, query_string};
use crate::period::{Grain, Period};

/// How far a count may move against its comparable before it is outlined,
/// in percent, when the page does not say (1,000 to under 500 or over
/// 1,500).
pub const DEFAULT_THRESHOLD_PCT: u64 = 50;

/// Shades of a cell with rows (the lightest for the fewest).
const SHADES: u64 = 4;

/// The periods a calendar shows, and the one it compares each with.
#[derive(Clone, Debug)]
pub struct Window {
    pub grain: Grain,
    /// The first period shown.
    pub start: NaiveDateTime,
    /// The first period after the window.
    pub end: NaiveDateTime,
}

impl Window {
    /// The window holding `at`: its year (days), its week from Monday
    /// (hours), or the ten years ending with its year (months).
    pub fn holding(at: NaiveDateTime, grain: Grain) -> Window {
        let year_start = |year| first_of(year, 1);
        let (start, end) = match grain {
            Grain::Hour => {
                let monday = at.date() - Duration::days(at.weekday().num_days_from_monday().into());
                let start = monday.and_time(NaiveTime::MIN);
                (start, start + Duration::days(7))
            }
            Grain::Month => (year_start(at.year() - 9), year_start(at.year() + 1)),
            Grain::Day | Grain::Whole => (year_start(at.year()), year_start(at.year() + 1)),
        };
        Window { grain, start, end }
    }

    /// The comparable of a period: a week before (days, hours) or a year
    /// before (months).
    pub fn comparable(&self, period: NaiveDateTime) -> NaiveDateTime {
        match self.grain {
            Grain::Month => period - Months::new(12),
            _ => period - Duration::days(7),
        }
    }

    /// The first instant whose partition the window needs: the comparable
    /// of its start.
    pub fn reach(&self) -> NaiveDateTime {
        self.comparable(self.start)
    }

    /// Every period of the window, in order.
    pub fn periods(&self) -> Vec<NaiveDateTime> {
        let mut periods = Vec::new();
        let mut at = self.start;
        while at < self.end {
            periods.push(at);
            at = Period::containing(at, self.grain).end();
        }
        periods
    }

    /// A window of the same size before and after (for its links).
    pub fn previous(&self) -> NaiveDateTime {
        self.start - Duration::hours(1)
    }

    pub fn next(&self) -> NaiveDateTime {
        self.end
    }
}

/// The first instant of a month (the year kept within 1 to 9999).
fn first_of(year: i32, month: u32) -> NaiveDateTime {
    NaiveDate::from_ymd_opt(year.clamp(1, 9999), month, 1)
        .unwrap_or(NaiveDate::MIN)
        .and_time(NaiveTime::MIN)
}

/// One period of the window as a cell.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub label: String,
    /// The partition's rows, or none when it does not exist.
    pub rows: Option<u64>,
    /// 0 for no rows (or none), else 1 to `SHADES`.
    pub shade: u64,
    /// Between the table's first and last partition, with none of its own.
    pub missing: bool,
    /// Past the table's retention: no partition, and none may be written.
    pub expired: bool,
    /// The comparable's rows, when this count moved more than the
    /// threshold against it.
    pub moved_from: Option<u64>,
}

/// The window's cells, from the partitions' row counts by label (the
/// window's and its comparables'), the table's span (first and last
/// labels), and the instant a period must end after to be kept (its
/// retention's limit, when it has one).
pub fn cells(
    window: &Window,
    counts: &HashMap<String, u64>,
    span: Option<&(String, String)>,
    kept_after: Option<NaiveDateTime>,
    threshold_pct: u64,
) -> Vec<Cell> {
    let label = |at| Period::containing(at, window.grain).label();
    let periods = window.periods();
    let most = periods
        .iter()
        .filter_map(|&at| counts.get(&label(at)))
        .max()
        .copied()
        .unwrap_or(0);
    periods
        .into_iter()
        .map(|at| {
            let name = label(at);
            let rows = counts.get(&name).copied();
            let before = counts.get(&label(window.comparable(at))).copied();
            let ends = Period::containing(at, window.grain).end();
            let expired = rows.is_none() && kept_after.is_some_and(|limit| ends <= limit);
            Cell {
                missing: rows.is_none()
                    && !expired
                    && span.is_some_and(|(first, last)| *first < name && name < *last),
                expired,
                shade: rows.map_or(0, |rows| shade(rows, most)),
                moved_from: rows
                    .zip(before)
                    .and_then(|(now, before)| moved(now, before, threshold_pct).then_some(before)),
                rows,
                label: name,
            }
        })
        .collect()
}

fn shade(rows: u64, most: u64) -> u64 {
    if rows == 0 || most == 0 {
        return 0;
    }
    // Integer steps: the largest count is the darkest shade.
    (rows.saturating_mul(SHADES).div_ceil(most)).clamp(1, SHADES)
}

/// Whether `now` moved more than `threshold_pct` percent against `before`.
fn moved(now: u64, before: u64, threshold_pct: u64) -> bool {
    let change = u128::from(now.abs_diff(before)) * 100;
    change > u128::from(threshold_pct) * u128::from(before)
}

/// The calendar as a table: rows and columns by grain, a cell a period.
pub fn calendar(window: &Window, cells: &[Cell], table: &str) -> Markup {
    let (row_names, column_names, place) = layout(window);
    let columns = column_names.len();
    let mut grid: Vec<Vec<Option<&Cell>>> = vec![vec![None; columns]; row_names.len()];
    for (i, cell) in cells.iter().enumerate() {
        let (row, column) = place(i);
        if let Some(slot) = grid.get_mut(row).and_then(|r| r.get_mut(column)) {
            *slot = Some(cell);
        }
    }
    html! {
        table class={ "calendar " (window.grain.as_str()) } aria-label={ "Partitions of " (table) } {
            // A name in a span that overflows its column rather than widen it.
            thead { tr { td {} @for name in &column_names { th scope="col" { span { (name) } } } } }
            tbody {
                @for (name, row) in row_names.iter().zip(&grid) {
                    tr {
                        th scope="row" { (name) }
                        @for cell in row {
                            @match cell {
                                Some(cell) => (cell_markup(cell, table)),
                                None => td.outside {},
                            }
                        }
                    }
                }
            }
        }
        p.legend {
            span.cell.shade-1 {} " fewer rows " span.cell.shade-4 {} " more rows "
            span.cell.missing {} " missing "
            span.cell.expired {} " past retention "
            span.cell.shade-2.moved {} " moved against the week (or year) before"
        }
    }
}

fn cell_markup(cell: &Cell, table: &str) -> Markup {
    let mut classes = format!("cell shade-{}", cell.shade);
    if cell.missing {
        classes.push_str(" missing");
    }
    if cell.expired {
        classes.push_str(" expired");
    }
    if cell.moved_from.is_some() {
        classes.push_str(" moved");
    }
    let described = match (cell.rows, cell.moved_from) {
        (Some(rows), Some(before)) => format!(
            "{}: {} rows, {} the period before",
            cell.label,
            grouped(rows),
            grouped(before)
        ),
        (Some(rows), None) => format!("{}: {} rows", cell.label, grouped(rows)),
        (None, _) if cell.missing => format!("{}: missing", cell.label),
        (None, _) if cell.expired => format!("{}: past retention", cell.label),
        (None, _) => format!("{}: no partition", cell.label),
    };
    let loads = format!(
        "/console/loads?{}",
        query_string(&[("table", table), ("ds", &cell.label)])
    );
    html! {
        td class=(classes) data-ds=(cell.label) data-rows=[cell.rows] title=(described) {
            @if cell.rows.is_some() {
                a href=(loads) aria-label=(described) {}
            } @else {
                span.visually-hidden { (described) }
            }
        }
    }
}

type Place = Box<dyn Fn(usize) -> (usize, usize)>;

/// The grid of a window: its row names, its column names, and where the
/// window's i-th period goes.
fn layout(window: &Window) -> (Vec<String>, Vec<String>, Place) {
    match window.grain {
        Grain::Hour => {
            let days = (0..7)
                .map(|d| {
                    (window.start + Duration::days(d))
                        .format("%a %d %b")
                        .to_string()
                })
                .collect();
            let hours = (0..24)
                .map(|h| {
                    if h % 3 == 0 {
                        format!("{h:02}")
                    } else {
                        String::new()
                    }
                })
                .collect();
            (days, hours, Box::new(|i| (i / 24, i % 24)))
        }
        Grain::Month => {
            let first = window.start.year();
            let years = (0..10).map(|y| (first + y).to_string()).collect();
            let months = (1..=12)
                .map(|m| first_of(2001, m).format("%b").to_string())
                .collect();
            (years, months, Box::new(|i| (i / 12, i % 12)))
        }
        Grain::Day | Grain::Whole => {
            let offset = window.start.weekday().num_days_from_monday();
            let monday = window.start - Duration::days(offset.into());
            let weekdays = (0..7)
                .map(|d| (monday + Duration::days(d)).format("%a").to_string())
                .collect();
            // As many weeks as the window's days reach into (53 or 54);
            // a week's column is named by the month whose first day it
            // holds, when that day is in the window (not the next year's
            // January).
            let weeks = ((window.end - monday).num_days() + 6) / 7;
            let weeks = (0..weeks)
                .map(|w| {
                    let sunday = monday + Duration::days(7 * w + 6);
                    let first = sunday - Duration::days(i64::from(sunday.day0()));
                    match sunday.day() <= 7 && first < window.end {
                        true => sunday.format("%b").to_string(),
                        false => String::new(),
                    }
                })
                .collect();
            let offset = usize::try_from(offset).unwrap_or(0);
            (
                weekdays,
                weeks,
                Box::new(move |i| ((i + offset) % 7, (i + offset) / 7)),
            )
        }
    }
}

/// The window's links: the same page a window before and after.
pub fn window_links(window: &Window, table: &str) -> Markup {
    let link = |at: NaiveDateTime| {
        let label = Period::containing(at, window.grain).label();
        format!(
            "/console/tables/{table}?{}",
            query_string(&[("at", &label)])
        )
    };
    html! {
        nav.window aria-label="Calendar window" {
            a href=(link(window.previous())) { "← earlier" }
            " "
            a href=(link(window.next())) { "later →" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(text: &str) -> NaiveDateTime {
        NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .unwrap()
            .and_time(NaiveTime::MIN)
    }

    #[test]
    fn a_day_window_is_its_year_and_compares_with_the_week_before() {
        let window = Window::holding(day("2026-06-15"), Grain::Day);
        assert_eq!(window.start, day("2026-01-01"));
        assert_eq!(window.end, day("2027-01-01"));
        assert_eq!(window.periods().len(), 365);
        assert_eq!(window.reach(), day("2025-12-25"));
    }

    #[test]
    fn missing_and_moved_days_are_marked() {
        let window = Window::holding(day("2026-01-10"), Grain::Day);
        let mut counts = HashMap::new();
        for d in 1..=20 {
            counts.insert(format!("2026-01-{d:02}"), 1000);
        }
        counts.remove("2026-01-05");
        counts.insert("2026-01-13".into(), 10);
        counts.insert("2026-01-14".into(), 1500);
        let span = ("2026-01-01".to_string(), "2026-01-20".to_string());
        let cells = cells(&window, &counts, Some(&span), None, DEFAULT_THRESHOLD_PCT);
        let cell = |label: &str| cells.iter().find(|c| c.label == label).unwrap();
        assert!(cell("2026-01-05").missing);
        assert_eq!(cell("2026-01-05").rows, None);
        assert_eq!(cell("2026-01-13").moved_from, Some(1000));
        assert_eq!(cell("2026-01-13").shade, 1);
        // 50% more is not more than the threshold; the day after the
        // missing one has nothing to compare with.
        assert_eq!(cell("2026-01-14").moved_from, None);
        assert_eq!(cell("2026-01-12").moved_from, None);
        assert_eq!(cell("2026-01-20").moved_from, Some(10));
        assert_eq!(cell("2026-01-14").shade, 4);
        // After the last partition nothing is expected.
        assert!(!cell("2026-01-25").missing);
    }

    #[test]
    fn days_past_retention_are_expired_not_missing() {
        let window = Window::holding(day("2026-01-10"), Grain::Day);
        let counts: HashMap<String, u64> = (8..=20)
            .map(|d| (format!("2026-01-{d:02}"), 1000))
            .collect();
        // The table's first partition was 2026-01-01, since dropped; days
        // ending by 2026-01-08 are past retention.
        let span = ("2026-01-01".to_string(), "2026-01-20".to_string());
        let limit = Some(day("2026-01-08"));
        let cells = cells(&window, &counts, Some(&span), limit, DEFAULT_THRESHOLD_PCT);
        let cell = |label: &str| cells.iter().find(|c| c.label == label).unwrap();
        assert!(cell("2026-01-03").expired && !cell("2026-01-03").missing);
        assert!(cell("2026-01-07").expired);
        assert!(!cell("2026-01-08").expired);
        assert!(!cell("2026-01-10").expired && cell("2026-01-10").rows.is_some());
        let markup = cell_markup(cell("2026-01-03"), "orders").into_string();
        assert!(
            markup.contains("expired") && markup.contains("past retention"),
            "{markup}"
        );
    }

    #[test]
    fn a_year_has_a_column_a_week_it_reaches_each_month_named_once() {
        for (year, weeks) in [("2026", 53), ("2012", 54)] {
            let window = Window::holding(day(&format!("{year}-06-01")), Grain::Day);
            let (_, columns, _) = layout(&window);
            assert_eq!(columns.len(), weeks, "{year}");
            let named: Vec<&String> = columns.iter().filter(|c| !c.is_empty()).collect();
            assert_eq!(named.len(), 12, "{year}: {columns:?}");
            assert_eq!((named[0].as_str(), named[11].as_str()), ("Jan", "Dec"));
        }
    }

    #[test]
    fn hour_and_month_windows_have_their_sizes() {
        let at = day("2026-10-14") + Duration::hours(13);
        let hours = Window::holding(at, Grain::Hour);
        assert_eq!(hours.start, day("2026-10-12"));
        assert_eq!(hours.periods().len(), 168);
        let months = Window::holding(at, Grain::Month);
        assert_eq!(months.start, day("2017-01-01"));
        assert_eq!(months.periods().len(), 120);
        assert_eq!(months.comparable(day("2026-03-01")), day("2025-03-01"));
    }
}
