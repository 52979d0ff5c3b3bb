#[test]
fn a_kilometre_is_a_thousand_metres() {
    assert_eq!(unit_table::convert(1.0, "km", "m"), Some(1000.0));
}
