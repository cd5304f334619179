//! What the macro knows of a checkpointed function, and the specs of one function called with
//! several policies.

use super::{enter_region, PolicyTable, RegionGuard, RegionPolicy};
use std::sync::Mutex;

/// What the `#[checkpoint]` macro knows of a function at compile time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionSpec {
    /// The function's name.
    pub name: &'static str,
    /// `module_path!()` where it is defined.
    pub module: &'static str,
    /// `file!()` where it is defined.
    pub file: &'static str,
    /// The line of the function.
    pub line: u32,
    /// The policy of its ops.
    pub policy: PolicyTable,
    /// `budget = f`: the region may keep at most this fraction of its save-everything bytes.
    pub budget: Option<f64>,
}

impl RegionSpec {
    /// A spec with the given name and policy, located at the caller (for hand-written regions).
    #[track_caller]
    pub const fn new(name: &'static str, policy: PolicyTable) -> RegionSpec {
        let loc = std::panic::Location::caller();
        RegionSpec { name, module: "", file: loc.file(), line: loc.line(), policy, budget: None }
    }
}

/// Opens a fresh instance of the function `site` describes with `policy` in place of the spec's
/// own policy and budget (what `#[checkpoint(policy = arg(p))]` expands to).
///
/// Region specs are `'static` (reports and graphs refer to them); one spec per distinct
/// (site, policy) pair is kept for the life of the process.
pub fn enter_region_with(site: &'static RegionSpec, policy: RegionPolicy) -> RegionGuard {
    if policy.is_none() {
        return RegionGuard::no_region();
    }
    if site.policy == *policy.table() && site.budget == policy.budget() {
        return enter_region(site);
    }
    static SPECS: Mutex<Vec<&'static RegionSpec>> = Mutex::new(Vec::new());
    let wanted = RegionSpec { policy: *policy.table(), budget: policy.budget(), ..*site };
    let spec = {
        let mut specs = SPECS.lock().unwrap_or_else(|e| e.into_inner());
        match specs.iter().find(|s| ***s == wanted) {
            Some(s) => *s,
            None => {
                let s: &'static RegionSpec = Box::leak(Box::new(wanted));
                specs.push(s);
                s
            }
        }
    };
    enter_region(spec)
}
