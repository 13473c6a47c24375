//! Side-by-side benchmarks (being written).
fn main() {}
