use remat::prelude::*;

#[checkpoint(policy = offload())]
fn empty(x: &Tensor) -> Tensor {
    x.exp()
}

#[checkpoint(policy = offload_names(ctx))]
fn unquoted(x: &Tensor) -> Tensor {
    x.exp()
}

#[checkpoint(policy = ofload(matmul))]
fn misspelled(x: &Tensor) -> Tensor {
    x.exp()
}

#[checkpoint(policy = rules(must_offlod = [matmul]))]
fn misspelled_key(x: &Tensor) -> Tensor {
    x.exp()
}

fn main() {}
