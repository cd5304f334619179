//! How long `peak=`'s exact search may look: a user with a limit near the least peak can buy a
//! smaller gap with time (docs/performance.md), and one sweeping many limits can buy speed with
//! a larger gap.

use crate::error::{Error, Result};
use crate::partition::Strategy;

/// The seconds [`crate::Strategy::Peak`]'s and `PeakOffload`'s exact search may take before it
/// answers with the best plan it holds and the gap it proved ([`SearchTime::DEFAULT`]: 20 s).
///
/// The search's rounds stop once the best plan is within 1 % of the proven bound, so a larger
/// time only changes answers the default leaves with a larger gap. The time bounds the rounds
/// of the program; the repair of a plan the last round found may run up to 3 s past it, and a
/// large graph's program overruns its limit by a few seconds (HiGHS checks the clock between
/// nodes). Without the `exact` feature the search walks the byte-budget plans and takes no
/// time limit.
///
/// ```
/// use remat_core::SearchTime;
///
/// assert_eq!(SearchTime::default().seconds(), 20.0);
/// assert_eq!("90".parse::<SearchTime>()?.seconds(), 90.0);
/// assert_eq!("2.5s".parse::<SearchTime>()?.seconds(), 2.5);
/// assert!("0".parse::<SearchTime>().is_err());
/// # Ok::<(), remat_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchTime {
    seconds: f64,
}

impl SearchTime {
    /// 20 seconds: on the 12-layer Llama and GPT of docs/performance.md, enough for a gap of
    /// 1 % or less from 1.3 times the least peak up.
    pub const DEFAULT: SearchTime = SearchTime { seconds: 20.0 };
    /// The least time accepted: a round of the program shorter than half a second finds no
    /// plan, and the search needs the least-peak search's share besides.
    pub const LEAST: f64 = 1.0;
    /// The most accepted: a week.
    pub const MOST: f64 = 7.0 * 24.0 * 3600.0;

    /// `seconds`, refused (an [`Error::Config`] of `search_seconds`) where it is not a number
    /// of seconds from [`SearchTime::LEAST`] to [`SearchTime::MOST`].
    pub fn new(seconds: f64) -> Result<SearchTime> {
        if !seconds.is_finite() {
            return Err(Error::config("search_seconds", format!("{seconds} is not a number of seconds")));
        }
        if !(Self::LEAST..=Self::MOST).contains(&seconds) {
            return Err(Error::config(
                "search_seconds",
                format!(
                    "{seconds} s is out of range: the exact peak search takes from {} s (a round of its program \
                     needs half a second to find a plan) to {} s (a week)",
                    Self::LEAST,
                    Self::MOST
                ),
            ));
        }
        Ok(SearchTime { seconds })
    }

    /// The seconds.
    pub fn seconds(self) -> f64 {
        self.seconds
    }

    /// This time, for a search by `strategy`; refused (an [`Error::Config`] of `search_seconds`)
    /// where `strategy` is not `peak=` or `peak+offload=`, which alone search by time: a time
    /// given with another is a mistake to point out, not to ignore.
    pub fn for_strategy(self, strategy: Strategy) -> Result<SearchTime> {
        if strategy.peak().is_some() {
            return Ok(self);
        }
        Err(Error::config(
            "search_seconds",
            format!("{} s: only `peak=` and `peak+offload=` search by time; `{strategy}` takes none", self.seconds),
        ))
    }
}

impl Default for SearchTime {
    fn default() -> SearchTime {
        SearchTime::DEFAULT
    }
}

impl std::fmt::Display for SearchTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}s", self.seconds)
    }
}

impl std::str::FromStr for SearchTime {
    type Err = Error;

    /// Seconds, with or without an `s`: `20`, `2.5`, `90s`.
    fn from_str(s: &str) -> Result<SearchTime> {
        let number = s.trim().strip_suffix('s').unwrap_or(s.trim());
        match number.parse::<f64>() {
            Ok(seconds) => SearchTime::new(seconds),
            Err(_) => Err(Error::config(
                "search_seconds",
                format!("`{}`: expected seconds (`20`, `2.5`, `90s`)", crate::text::shorten(s, crate::text::CELL)),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(text: &str) -> String {
        match text.parse::<SearchTime>() {
            Err(Error::Config { setting, message }) => format!("{setting}: {message}"),
            other => panic!("{text}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn seconds_are_read_with_or_without_a_unit() {
        for (text, seconds) in [("20", 20.0), ("2.5", 2.5), ("90s", 90.0), (" 1 ", 1.0), ("604800", 604_800.0)] {
            assert_eq!(text.parse::<SearchTime>().map(SearchTime::seconds).ok(), Some(seconds), "{text}");
        }
        assert_eq!(SearchTime::default().to_string().parse::<SearchTime>().ok(), Some(SearchTime::DEFAULT));
    }

    #[test]
    fn a_bad_time_is_refused_with_what_is_wrong() {
        assert!(refusal("0").contains("out of range"), "{}", refusal("0"));
        assert!(refusal("0.5").contains("from 1 s"), "{}", refusal("0.5"));
        assert!(refusal("-3").contains("out of range"));
        assert!(refusal("604801").contains("a week"));
        assert!(refusal("NaN").contains("not a number of seconds"));
        assert!(refusal("inf").contains("not a number of seconds"));
        assert!(refusal("ten").starts_with("search_seconds: `ten`: expected seconds"), "{}", refusal("ten"));
        assert!(refusal("20ms").contains("expected seconds"));
        assert!(refusal("").contains("expected seconds"));
    }

    #[test]
    fn a_time_is_for_the_peak_searches_only() {
        let time = SearchTime::new(3.0).unwrap();
        for strategy in ["peak=4096", "peak+offload=1MiB"] {
            assert_eq!(time.for_strategy(strategy.parse().unwrap()).ok(), Some(time), "{strategy}");
        }
        for strategy in ["respect", "mincut", "budget=0.5", "budget+offload=4096"] {
            let refused = time.for_strategy(strategy.parse().unwrap()).unwrap_err().to_string();
            assert!(refused.contains(&format!("`{strategy}` takes none")), "{refused}");
        }
    }
}
