//! The wardcell client. (Being written.)
#![forbid(unsafe_code)]
fn main() {}
