//! How many metres one of each unit is.

/// The units this crate knows, with their length in metres.
const UNITS: &[(&str, f64)] = &[
    ("mm", 0.001),
    ("cm", 0.01),
    ("m", 1.0),
    ("km", 1000.0),
    ("in", 0.0254),
    ("ft", 0.3048),
    ("yd", 0.9144),
    ("mi", 1609.344),
    ("nmi", 1852.0),
    ("au", 149_597_870_700.0),
    ("ly", 9_460_730_472_580_800.0),
    ("pc", 30_856_775_814_913_673.0),
];

/// The length of one `unit` in metres, if the table knows it.
pub fn metres_per(unit: &str) -> Option<f64> {
    UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, metres)| *metres)
}

#[cfg(test)]
mod tests {
    use super::metres_per;

    #[test]
    fn a_foot_is_twelve_inches() {
        let ratio = metres_per("ft").unwrap() / metres_per("in").unwrap();
        assert!((ratio - 12.0).abs() < 1e-9);
    }

    #[test]
    fn unknown_units_are_none() {
        assert_eq!(metres_per("furlong"), None);
    }
}
