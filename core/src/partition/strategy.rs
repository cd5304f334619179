//! The strategies (how to choose what to save) and their budgets, with their names as the
//! command line and documents spell them.

use super::amount;
use crate::error::Error;

/// How to choose what to save.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strategy {
    /// Eager semantics: every tag honoured literally (the default).
    Respect,
    /// Compiler semantics: a min-cut over bytes decides what the tags leave open.
    MinCut,
    /// Fewest recompute FLOPs within a byte budget; Prefer tags become soft.
    Budget(Budget),
    /// A device-byte budget where the solver chooses, per open value, save, offload or
    /// recompute: the least recompute time plus exposed transfer time
    /// ([`CostModel`](super::CostModel)).
    BudgetOffload(Budget),
    /// A peak-memory budget for a model: the plan's predicted peak (inputs and parameters
    /// included; on the CPU it equals the measured one) at most this many bytes at every step,
    /// with the least recompute, searched exactly where the `exact` feature is on
    /// ([`crate::Problem::partition`], [`crate::Model::with_strategy`]; a partition graph alone
    /// has no schedule to measure a peak on, so [`partition`](fn@super::partition) refuses it).
    Peak(u64),
    /// [`Strategy::Peak`] where the solver may also offload values to host memory: the plan's
    /// predicted device peak at most this many bytes (the host's counted apart, as
    /// [`crate::Plan::predicted_host_peak`]), with the least recompute time plus exposed
    /// transfer time ([`CostModel`](super::CostModel)), as under [`Strategy::BudgetOffload`].
    PeakOffload(u64),
}

/// A byte budget for saved values (inputs, parameters and constants excluded).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// At most this many bytes.
    Bytes(u64),
    /// A fraction of the way from the bytes of the forced saves alone (0.0) to the bytes
    /// `Respect` saves (1.0).
    Fraction(f64),
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Strategy::Respect => f.write_str("respect"),
            Strategy::MinCut => f.write_str("mincut"),
            Strategy::Budget(Budget::Bytes(b)) => write!(f, "budget={b}"),
            Strategy::Budget(Budget::Fraction(x)) => write!(f, "budget={x:?}"),
            Strategy::BudgetOffload(Budget::Bytes(b)) => write!(f, "budget+offload={b}"),
            Strategy::BudgetOffload(Budget::Fraction(x)) => write!(f, "budget+offload={x:?}"),
            Strategy::Peak(b) => write!(f, "peak={b}"),
            Strategy::PeakOffload(b) => write!(f, "peak+offload={b}"),
        }
    }
}

impl std::str::FromStr for Budget {
    type Err = String;

    /// A fraction when it is a decimal number (`0.5`, `1.0`), else bytes with an optional
    /// binary unit (`4096`, `64KiB`, `2MiB`, `1GiB`, `1TiB`). A bad value is told what is wrong
    /// with it (negative, hexadecimal, an unknown unit, too large, ...).
    fn from_str(b: &str) -> Result<Budget, String> {
        amount::budget(b)
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;

    /// `respect`, `mincut`, `budget=B`, `budget+offload=B` (see [`Budget`]'s `from_str`),
    /// `peak=BYTES` (`peak=3MiB`) or `peak+offload=BYTES`. An error ([`Error::Config`] of the setting `strategy`) names
    /// the strategy and what is wrong with its value.
    fn from_str(s: &str) -> Result<Strategy, Error> {
        parse_strategy(s).map_err(|message| Error::config("strategy", message))
    }
}

/// [`Strategy`]'s `from_str`, the error its message.
fn parse_strategy(s: &str) -> Result<Strategy, String> {
    let at = |key: &str, value: &str, why: String| {
        format!("`{key}={}`: {why}", crate::text::shorten(value, crate::text::CELL))
    };
    match s {
        "respect" => Ok(Strategy::Respect),
        "mincut" => Ok(Strategy::MinCut),
        _ => {
            let peak = |key: &str, b: &str, make: fn(u64) -> Strategy| {
                amount::bytes(b).map(make).map_err(|e| {
                    // A fraction is what `budget=` takes; a peak counts inputs and parameters,
                    // which no fraction of saved bytes measures.
                    let fraction = amount::budget(b).is_ok_and(|x| matches!(x, Budget::Fraction(_)));
                    let e =
                        if fraction { format!("a peak is bytes ({}), not a fraction", amount::BYTES_FORMS) } else { e };
                    at(key, b, e)
                })
            };
            if let Some(b) = s.strip_prefix("budget=") {
                amount::budget(b).map(Strategy::Budget).map_err(|e| at("budget", b, e))
            } else if let Some(b) = s.strip_prefix("budget+offload=") {
                amount::budget(b).map(Strategy::BudgetOffload).map_err(|e| at("budget+offload", b, e))
            } else if let Some(b) = s.strip_prefix("peak=") {
                peak("peak", b, Strategy::Peak)
            } else if let Some(b) = s.strip_prefix("peak+offload=") {
                peak("peak+offload", b, Strategy::PeakOffload)
            } else {
                Err(format!(
                    "unknown strategy `{}`: expected `respect`, `mincut`, `budget=B`, `budget+offload=B`, \
                     `peak=BYTES` or `peak+offload=BYTES`",
                    crate::text::shorten(s, crate::text::CELL)
                ))
            }
        }
    }
}

impl Strategy {
    /// The same strategy with the solver's offload choice on (`Budget` becomes `BudgetOffload`,
    /// `Peak` `PeakOffload`) or off; `Respect` and `MinCut` are unchanged (they offload what the
    /// tags ask either way).
    pub fn with_offload(self, on: bool) -> Strategy {
        match (self, on) {
            (Strategy::Budget(b), true) => Strategy::BudgetOffload(b),
            (Strategy::BudgetOffload(b), false) => Strategy::Budget(b),
            (Strategy::Peak(b), true) => Strategy::PeakOffload(b),
            (Strategy::PeakOffload(b), false) => Strategy::Peak(b),
            (s, _) => s,
        }
    }

    /// Whether the solver chooses offloads itself (`budget+offload=`, `peak+offload=`), rather
    /// than offloading what the tags ask.
    pub fn chooses_offload(self) -> bool {
        matches!(self, Strategy::BudgetOffload(_) | Strategy::PeakOffload(_))
    }

    /// The peak limit, for `Peak` and `PeakOffload`.
    pub fn peak(self) -> Option<u64> {
        match self {
            Strategy::Peak(b) | Strategy::PeakOffload(b) => Some(b),
            _ => None,
        }
    }

    /// The budget, for `Budget` and `BudgetOffload`.
    pub fn budget(self) -> Option<Budget> {
        match self {
            Strategy::Budget(b) | Strategy::BudgetOffload(b) => Some(b),
            _ => None,
        }
    }
}
