use remat::prelude::*;

#[checkpoint]
const fn f(n: usize) -> usize {
    n + 1
}

fn main() {}
