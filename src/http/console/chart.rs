//! Rows a partition over a calendar's window, as an SVG chart (pure code:
//! cells in, markup out): a line through the partitions (broken where one
//! is missing), a y axis of a few round counts, the first and last period
//! under the x axis, and a dot a partition when there are few enough to
//! tell apart, so that a sparse table's points show.
//!
//! The drawing is in pixels of a 960 × 220 box that the page scales down
//! as a whole (never stretched: its text keeps its shape).

use maud::{html, Markup};

use super::calendar::Cell;
use super::text::grouped;

const WIDTH: u64 = 960;
const HEIGHT: u64 = 220;
/// Room for the y axis's counts on the left, the x axis's periods below.
const LEFT: u64 = 72;
const RIGHT: u64 = 16;
const TOP: u64 = 12;
const BOTTOM: u64 = 32;
/// About how many steps the y axis is cut into.
const Y_STEPS: u64 = 4;
/// Up to this many partitions, each is drawn as a dot too.
const MOST_DOTS: usize = 62;

/// The chart of `cells`, from the window's first partition to its last.
pub fn chart(cells: &[Cell]) -> Markup {
    let first_held = cells.iter().position(|c| c.rows.is_some()).unwrap_or(0);
    let last_held = cells
        .iter()
        .rposition(|c| c.rows.is_some())
        .map_or(0, |i| i + 1);
    let cells = cells.get(first_held..last_held).unwrap_or_default();
    let most = cells.iter().filter_map(|c| c.rows).max().unwrap_or(0);
    let ticks = y_ticks(most);
    let plot = Plot {
        periods: u64::try_from(cells.len()).unwrap_or(u64::MAX).max(1),
        top_count: ticks.last().copied().unwrap_or(1).max(1),
    };
    let first = cells.first().map_or("", |c| c.label.as_str());
    let last = cells.last().map_or("", |c| c.label.as_str());
    let described = format!(
        "Rows a partition from {first} to {last}; the largest is {}",
        grouped(most)
    );
    html! {
        figure.chart {
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(described) {
                (y_axis(&plot, &ticks))
                (x_axis(first, last))
                @for points in lines(&plot, cells) {
                    polyline.line points=(points) {}
                }
                @if cells.iter().filter(|c| c.rows.is_some()).count() <= MOST_DOTS {
                    @for (x, y) in dots(&plot, cells) {
                        circle.dot cx=(x) cy=(y) r="3.5" {}
                    }
                }
            }
            figcaption { (described) }
        }
    }
}

/// Where counts and periods fall in the box.
struct Plot {
    periods: u64,
    /// The count at the top of the y axis (its last tick).
    top_count: u64,
}

impl Plot {
    /// The middle of the `i`-th period's slot across.
    fn x(&self, i: usize) -> u64 {
        let i = u64::try_from(i).unwrap_or(u64::MAX);
        LEFT + (WIDTH - LEFT - RIGHT) * (2 * i + 1) / (2 * self.periods)
    }

    fn y(&self, count: u64) -> u64 {
        let height = u128::from(HEIGHT - TOP - BOTTOM);
        let up = height * u128::from(count.min(self.top_count)) / u128::from(self.top_count);
        HEIGHT - BOTTOM - u64::try_from(up).unwrap_or(0)
    }
}

/// The y axis's ticks: 0 and a few round steps (1, 2 or 5 times a power of
/// ten) up to the first at or over `most`.
pub fn y_ticks(most: u64) -> Vec<u64> {
    let wanted = most.div_ceil(Y_STEPS).max(1);
    let mut power = 1u64;
    let step = loop {
        if let Some(step) = [1, 2, 5]
            .into_iter()
            .map(|m| power.saturating_mul(m))
            .find(|&step| step >= wanted)
        {
            break step;
        }
        power = power.saturating_mul(10);
    };
    let steps = most.div_ceil(step).max(1);
    (0..=steps).map(|n| n.saturating_mul(step)).collect()
}

/// The y axis: a line, and a gridline and a count at each tick.
fn y_axis(plot: &Plot, ticks: &[u64]) -> Markup {
    html! {
        line.axis x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(HEIGHT - BOTTOM) {}
        @for &tick in ticks {
            @let y = plot.y(tick);
            @if tick > 0 {
                line.grid x1=(LEFT) y1=(y) x2=(WIDTH - RIGHT) y2=(y) {}
            }
            text.y-tick x=(LEFT - 8) y=(y) text-anchor="end" dominant-baseline="middle" {
                (grouped(tick))
            }
        }
    }
}

/// The x axis: a line, the first period under its left end and the last
/// under its right.
fn x_axis(first: &str, last: &str) -> Markup {
    let below = HEIGHT - BOTTOM + 20;
    html! {
        line.axis x1=(LEFT) y1=(HEIGHT - BOTTOM) x2=(WIDTH - RIGHT) y2=(HEIGHT - BOTTOM) {}
        text.x-label x=(LEFT) y=(below) text-anchor="start" { (first) }
        @if last != first {
            text.x-label x=(WIDTH - RIGHT) y=(below) text-anchor="end" { (last) }
        }
    }
}

/// The `points` of each unbroken run of partitions.
fn lines(plot: &Plot, cells: &[Cell]) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current = String::new();
    for (i, cell) in cells.iter().enumerate() {
        match cell.rows {
            Some(rows) => current.push_str(&format!("{},{} ", plot.x(i), plot.y(rows))),
            None if !current.is_empty() => lines.push(std::mem::take(&mut current)),
            None => {}
        }
    }
    if !current.is_empty() {
        lines.push(current);
    }
    lines
}

/// Each partition's point.
fn dots(plot: &Plot, cells: &[Cell]) -> Vec<(u64, u64)> {
    cells
        .iter()
        .enumerate()
        .filter_map(|(i, cell)| Some((plot.x(i), plot.y(cell.rows?))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_y_axis_counts_in_round_steps_up_past_the_largest() {
        assert_eq!(y_ticks(0), [0, 1]);
        assert_eq!(y_ticks(1), [0, 1]);
        assert_eq!(y_ticks(3), [0, 1, 2, 3]);
        assert_eq!(y_ticks(20), [0, 5, 10, 15, 20]);
        assert_eq!(y_ticks(362), [0, 100, 200, 300, 400]);
        assert_eq!(y_ticks(1_234_567), [0, 500_000, 1_000_000, 1_500_000]);
    }

    #[test]
    fn a_lone_partition_is_a_dot_between_its_labels() {
        let cell = |label: &str, rows| Cell {
            label: label.into(),
            rows,
            shade: 0,
            missing: false,
            expired: false,
            moved_from: None,
        };
        let cells = [cell("2026-10-01", None), cell("2026-10-02", Some(7))];
        let svg = chart(&cells).into_string();
        assert_eq!(svg.matches("<circle").count(), 1, "{svg}");
        assert!(svg.contains(">2026-10-02</text>"), "{svg}");
        assert!(!svg.contains(">2026-10-01<"), "{svg}");
    }
}
