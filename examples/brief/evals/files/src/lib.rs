//! Unit conversion over the table in `tables.rs`.

mod tables;

/// Converts `value` from one unit to another, or `None` for an unknown unit.
pub fn convert(value: f64, from: &str, to: &str) -> Option<f64> {
    let from = tables::metres_per(from)?;
    let to = tables::metres_per(to)?;
    Some(value * from / to)
}
