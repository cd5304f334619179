use remat::prelude::*;

#[checkpoint(crate = my_remat)]
fn unquoted(x: &Tensor) -> Tensor {
    x.exp()
}

#[checkpoint(policy = save_all, crate = "not a path", crate = "remat")]
fn not_a_path(x: &Tensor) -> Tensor {
    x.exp()
}

fn main() {
    let _ = policy!(save_all, crate = my_remat);
    let _ = policy!(crate = "remat", save(matmul), crate = "remat");
}
