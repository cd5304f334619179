//! The words of the grammar and of its messages, each in one place.

use crate::{closest, Policy};

/// The words of the grammar, each in one place.
pub mod kw {
    /// `policy = <form>`.
    pub const POLICY: &str = "policy";
    /// `budget = <fraction>`.
    pub const BUDGET: &str = "budget";
    /// `policy = recompute_all`.
    pub const RECOMPUTE_ALL: &str = "recompute_all";
    /// `policy = save_all`.
    pub const SAVE_ALL: &str = "save_all";
    /// `policy = save(op, ..)`.
    pub const SAVE: &str = "save";
    /// `policy = recompute(op, ..)`.
    pub const RECOMPUTE: &str = "recompute";
    /// `policy = offload(op, ..)`.
    pub const OFFLOAD: &str = "offload";
    /// `policy = save_names("a", ..)`.
    pub const SAVE_NAMES: &str = "save_names";
    /// `policy = offload_names("a", ..)`.
    pub const OFFLOAD_NAMES: &str = "offload_names";
    /// `policy = rules(..)`.
    pub const RULES: &str = "rules";
    /// The policy forms.
    pub const FORMS: &[&str] = &[RECOMPUTE_ALL, SAVE_ALL, SAVE, RECOMPUTE, OFFLOAD, SAVE_NAMES, OFFLOAD_NAMES, RULES];
    /// `must_save`, a `rules(..)` key and a `default`.
    pub const MUST_SAVE: &str = "must_save";
    /// See [`MUST_SAVE`].
    pub const PREFER_SAVE: &str = "prefer_save";
    /// See [`MUST_SAVE`].
    pub const MUST_RECOMPUTE: &str = "must_recompute";
    /// See [`MUST_SAVE`].
    pub const PREFER_RECOMPUTE: &str = "prefer_recompute";
    /// See [`MUST_SAVE`].
    pub const MUST_OFFLOAD: &str = "must_offload";
    /// See [`MUST_SAVE`].
    pub const PREFER_OFFLOAD: &str = "prefer_offload";
    /// The policies, in the order of [`Resolved::lists`](crate::forms::Resolved::lists).
    pub const POLICIES: &[&str] =
        &[MUST_SAVE, PREFER_SAVE, MUST_RECOMPUTE, PREFER_RECOMPUTE, MUST_OFFLOAD, PREFER_OFFLOAD];
    /// `rules(default = <policy>)`.
    pub const DEFAULT: &str = "default";
}

/// The policies in the order of [`kw::POLICIES`] (checked by a test).
pub const POLICY_ORDER: [Policy; 6] = Policy::ALL;

/// The index of `policy` in [`Resolved::lists`](crate::forms::Resolved::lists) and [`kw::POLICIES`].
pub fn list_index(policy: Policy) -> usize {
    POLICY_ORDER.iter().position(|p| *p == policy).expect("every policy has a list")
}

/// `a, b, .. or z`: the alternatives of a message.
pub(super) fn one_of(items: impl IntoIterator<Item = String>) -> String {
    let items: Vec<String> = items.into_iter().collect();
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// The policies as written in a policy, each followed by `suffix` (`` `must_save = [..]` ``).
pub(super) fn policy_names(suffix: &str) -> impl Iterator<Item = String> + '_ {
    kw::POLICIES.iter().map(move |p| format!("`{p}{suffix}`"))
}

/// `` `must_save`, `prefer_save`, .. or `prefer_offload` ``: the policies, for messages.
pub(super) fn policy_words() -> String {
    one_of(policy_names(""))
}

/// `"; did you mean `x`?"` when `word` is close to one of `candidates`, else an empty string.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    match closest(word, candidates) {
        Some(close) => format!("; did you mean `{close}`?"),
        None => String::new(),
    }
}

/// The message for an unknown policy form.
pub const EXPECTED_POLICY: &str = "expected one of `recompute_all`, `save_all`, `save(..)`, `recompute(..)`, \
     `offload(..)`, `save_names(..)`, `offload_names(..)`, `rules(..)`";
