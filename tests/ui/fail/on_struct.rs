use remat::prelude::*;

#[checkpoint]
struct Layer {
    w: Tensor,
}

fn main() {}
