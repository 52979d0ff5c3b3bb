use unit_table::convert;

fn main() {
    let metres = convert(3.0, "ft", "m").expect("known units");
    println!("3 ft = {metres:.3} m");
}
