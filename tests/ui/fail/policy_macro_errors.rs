use remat::prelude::*;

const MISSPELLED_OP: RegionPolicy = policy!(save(matmull));
const MISSPELLED_FORM: RegionPolicy = policy!(sav_all);
const VIEW: RegionPolicy = policy!(save(reshape));

fn main() {
    let _ = policy!(save_all, budget = 1.5);
    let _ = policy!(save_all, budgt = 0.5);
    let _ = policy!(save_all, recompute_all);
    let _ = policy!(save_names(attn));
    let _ = policy!();
}
