//! The grammar of policy forms (`recompute_all`, `save_all`, `save(..)`, `recompute(..)`,
//! `offload(..)`, `save_names(..)`, `offload_names(..)`, `rules(..)`, `budget = f`), in one place.
//!
//! Two front ends read it: the `#[checkpoint]` and `policy!` macros, which turn their tokens into
//! an [`Expr`] spanned by the user's tokens, and [`parse`], which reads the same forms from a
//! string at run time (a flag, a config file), spanned by byte ranges. Both then call
//! [`resolve_policy`] / [`resolve_budget`] / [`resolve_items`], so a form means the same thing and
//! a mistake gets the same message at compile time and at run time.

use crate::{closest, lookup, suggest, OpKind, Policy};
use std::fmt;
use std::ops::Range;

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
    /// The policies, in the order of [`super::Resolved::lists`].
    pub const POLICIES: &[&str] =
        &[MUST_SAVE, PREFER_SAVE, MUST_RECOMPUTE, PREFER_RECOMPUTE, MUST_OFFLOAD, PREFER_OFFLOAD];
    /// `rules(default = <policy>)`.
    pub const DEFAULT: &str = "default";
}

/// The policies in the order of [`kw::POLICIES`] (checked by a test).
pub const POLICY_ORDER: [Policy; 6] = Policy::ALL;

/// The index of `policy` in [`Resolved::lists`] and [`kw::POLICIES`].
pub fn list_index(policy: Policy) -> usize {
    POLICY_ORDER.iter().position(|p| *p == policy).expect("every policy has a list")
}

/// `a, b, .. or z`: the alternatives of a message.
fn one_of(items: impl IntoIterator<Item = String>) -> String {
    let items: Vec<String> = items.into_iter().collect();
    match items.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

/// The policies as written in a policy, each followed by `suffix` (`` `must_save = [..]` ``).
fn policy_names(suffix: &str) -> impl Iterator<Item = String> + '_ {
    kw::POLICIES.iter().map(move |p| format!("`{p}{suffix}`"))
}

/// `` `must_save`, `prefer_save`, .. or `prefer_offload` ``: the policies, for messages.
fn policy_words() -> String {
    one_of(policy_names(""))
}

/// A piece of a policy as written; `S` says where (a token span, a byte range).
#[derive(Clone, Debug)]
pub enum Expr<S> {
    /// `save_all`, `matmul`.
    Ident(String, S),
    /// `"attn"`.
    Str(String, S),
    /// `0.5`, `-1` (the span covers the sign).
    Number(f64, S),
    /// `save(matmul, gelu)`.
    Call {
        /// What is called (an [`Expr::Ident`] when well formed).
        func: Box<Expr<S>>,
        /// The arguments.
        args: Vec<Expr<S>>,
        /// The whole call.
        span: S,
    },
    /// `must_save = [matmul]`.
    Assign {
        /// The left side (an [`Expr::Ident`] when well formed).
        key: Box<Expr<S>>,
        /// The right side.
        value: Box<Expr<S>>,
        /// The whole assignment.
        span: S,
    },
    /// `[matmul, gelu]`.
    List(Vec<Expr<S>>, S),
    /// Anything else the front end read.
    Other(S),
}

impl<S> Expr<S> {
    /// Where the whole piece was written.
    pub fn span(&self) -> &S {
        match self {
            Expr::Ident(_, s) | Expr::Str(_, s) | Expr::Number(_, s) | Expr::List(_, s) | Expr::Other(s) => s,
            Expr::Call { span, .. } | Expr::Assign { span, .. } => span,
        }
    }

    fn ident(&self) -> Option<(&str, &S)> {
        match self {
            Expr::Ident(name, span) => Some((name, span)),
            _ => None,
        }
    }
}

/// One problem, with where it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic<S> {
    /// Where.
    pub span: S,
    /// What, lowercase, naming the form literally.
    pub message: String,
}

/// The problems found so far.
pub type Diagnostics<S> = Vec<Diagnostic<S>>;

fn report<S: Clone>(diags: &mut Diagnostics<S>, span: &S, message: impl Into<String>) {
    diags.push(Diagnostic { span: span.clone(), message: message.into() });
}

/// A resolved policy: op kinds per policy, names that must be saved or offloaded, the default.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// Op kinds per policy, indexed like [`kw::POLICIES`] / [`POLICY_ORDER`].
    pub lists: [Vec<OpKind>; 6],
    /// Value names (`.name("attn")`) that must be saved.
    pub save_names: Vec<String>,
    /// Value names that must be offloaded.
    pub offload_names: Vec<String>,
    /// The policy of every other op.
    pub default: Policy,
}

impl Default for Resolved {
    /// `recompute_all`.
    fn default() -> Self {
        Resolved {
            lists: Default::default(),
            save_names: Vec::new(),
            offload_names: Vec::new(),
            default: Policy::PreferRecompute,
        }
    }
}

/// A policy with its optional budget: what `policy!(..)` and a policy string mean.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Spec {
    /// The policy.
    pub policy: Resolved,
    /// `budget = f`, in [0, 1].
    pub budget: Option<f64>,
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

/// Resolves one policy form, reporting every problem into `diags` (the result is meaningless
/// when something was reported).
pub fn resolve_policy<S: Clone>(value: &Expr<S>, diags: &mut Diagnostics<S>) -> Resolved {
    let mut resolved = Resolved::default();
    let (form, form_span, args) = match value {
        Expr::Ident(name, span) => (name.as_str(), span, None),
        Expr::Call { func, args, .. } => match func.ident() {
            Some((name, span)) => (name, span, Some(args)),
            None => {
                report(diags, func.span(), format!("unknown policy; {EXPECTED_POLICY}"));
                return resolved;
            }
        },
        other => {
            report(diags, other.span(), format!("expected a policy, {}", &EXPECTED_POLICY["expected ".len()..]));
            return resolved;
        }
    };
    match (form, args) {
        (kw::RECOMPUTE_ALL, None) => {}
        (kw::SAVE_ALL, None) => resolved.default = Policy::PreferSave,
        (kw::RECOMPUTE_ALL | kw::SAVE_ALL, Some(_)) => {
            report(diags, value.span(), format!("`{form}` takes no arguments; write `policy = {form}`"));
        }
        (kw::SAVE | kw::RECOMPUTE | kw::OFFLOAD, Some(args)) => {
            let (policy, or_else) = match form {
                kw::SAVE => (Policy::MustSave, "or use `policy = recompute_all`"),
                kw::RECOMPUTE => (Policy::MustRecompute, "or use `policy = save_all`"),
                _ => (Policy::MustOffload, "or use `policy = recompute_all`"),
            };
            let list = OpList { key: form, items: op_names(args, diags), whole: value.span() };
            resolved.lists[list_index(policy)] = kinds(list.resolve(policy, or_else, diags));
            if policy == Policy::MustRecompute {
                resolved.default = Policy::PreferSave;
            }
        }
        (kw::SAVE_NAMES, Some(args)) => resolved.save_names = value_names(form, args, value.span(), diags),
        (kw::OFFLOAD_NAMES, Some(args)) => resolved.offload_names = value_names(form, args, value.span(), diags),
        (kw::RULES, Some(args)) => rules(args, &mut resolved, diags),
        (kw::SAVE | kw::RECOMPUTE | kw::OFFLOAD, None) => {
            report(diags, form_span, format!("`{form}` needs the op kinds it applies to, as in `{form}(matmul)`"));
        }
        (kw::SAVE_NAMES | kw::OFFLOAD_NAMES, None) => {
            let verb = if form == kw::SAVE_NAMES { "saves" } else { "offloads" };
            report(diags, form_span, format!("`{form}` needs the value names it {verb}, as in `{form}(\"attn\")`"));
        }
        (kw::RULES, None) => {
            report(diags, form_span, "`rules` needs its lists, as in `rules(must_save = [matmul])`");
        }
        _ => {
            let hint = did_you_mean(form, kw::FORMS.iter().copied());
            let hint = if hint.is_empty() { format!("; {EXPECTED_POLICY}") } else { hint };
            report(diags, form_span, format!("unknown policy `{form}`{hint}"));
        }
    }
    resolved
}

/// Resolves `budget = value`: a number in [0, 1].
pub fn resolve_budget<S: Clone>(value: &Expr<S>, diags: &mut Diagnostics<S>) -> Option<f64> {
    match value {
        Expr::Number(n, _) if (0.0..=1.0).contains(n) => Some(*n),
        Expr::Number(n, span) => {
            report(
                diags,
                span,
                format!(
                    "`budget` must be in [0, 1], the fraction of the region's save-everything bytes it may keep; got {n:?}"
                ),
            );
            None
        }
        other => {
            report(diags, other.span(), "`budget` must be a number in [0, 1], the fraction of the region's save-everything bytes it may keep, as in `budget = 0.5`");
            None
        }
    }
}

/// Resolves the items of `policy!(..)` or of a policy string: a form (or `policy = <form>`),
/// then optionally `budget = f`. `whole` spans everything, for an empty input.
pub fn resolve_items<S: Clone>(items: &[Expr<S>], whole: &S, diags: &mut Diagnostics<S>) -> Spec {
    let mut spec = Spec::default();
    let mut form_seen = false;
    let mut budget_seen = false;
    for item in items {
        let (key, value) = match item {
            Expr::Assign { key, value, .. } => match key.ident() {
                Some((name, span)) => (Some((name, span)), &**value),
                None => {
                    report(diags, key.span(), "expected `budget = ..`");
                    continue;
                }
            },
            other => (None, other),
        };
        match key {
            None | Some((kw::POLICY, _)) => {
                if form_seen {
                    let span = key.map_or(value.span(), |(_, s)| s);
                    report(diags, span, "a second policy; give one form, then optionally `budget = ..`");
                    continue;
                }
                form_seen = true;
                spec.policy = resolve_policy(value, diags);
            }
            Some((kw::BUDGET, span)) => {
                if budget_seen {
                    report(diags, span, "duplicate `budget`; give it once");
                    continue;
                }
                budget_seen = true;
                spec.budget = resolve_budget(value, diags);
            }
            Some((name, span)) => {
                let hint = did_you_mean(name, [kw::POLICY, kw::BUDGET]);
                let hint = if hint.is_empty() { "; expected `budget = ..`".to_string() } else { hint };
                report(diags, span, format!("unknown key `{name}` in a policy{hint}"));
            }
        }
    }
    if !form_seen && diags.is_empty() {
        report(diags, whole, format!("no policy given; {EXPECTED_POLICY}"));
    }
    spec
}

/// A list of op kinds as written, with the whole list for errors about it.
struct OpList<'a, S> {
    /// The key or form naming the list (`save`, `must_save`).
    key: &'a str,
    items: Vec<(&'a str, &'a S)>,
    whole: &'a S,
}

impl<'a, S: Clone> OpList<'a, S> {
    /// The op kinds, reporting unknown kinds, views in save and offload lists, duplicates and an
    /// empty list (`or_else` says what to write instead).
    fn resolve(&self, policy: Policy, or_else: &str, diags: &mut Diagnostics<S>) -> Vec<(OpKind, &'a S)> {
        let key = self.key;
        if self.items.is_empty() {
            let call_form = key == kw::SAVE || key == kw::RECOMPUTE || key == kw::OFFLOAD;
            let written = if call_form { format!("{key}()") } else { format!("{key} = []") };
            let example = if call_form { format!("{key}(matmul)") } else { format!("{key} = [matmul]") };
            report(
                diags,
                self.whole,
                format!("`{written}` lists no op kind; name at least one, as in `{example}`, {or_else}"),
            );
            return Vec::new();
        }
        let mut resolved: Vec<(OpKind, &S)> = Vec::new();
        for &(name, span) in &self.items {
            let Some(info) = lookup(name) else {
                let message = if OpKind::from_name(name).is_some() {
                    format!(
                        "unknown op kind `{name}`: it is internal to the backward pass and cannot be named in a policy"
                    )
                } else if let Some(close) = suggest(name) {
                    format!("unknown op kind `{name}`; did you mean `{close}`?")
                } else {
                    format!("unknown op kind `{name}`; op kinds are named like the tensor methods that record them, as in `matmul`, `gelu`, `softmax`")
                };
                report(diags, span, message);
                continue;
            };
            if policy.is_save() && info.view {
                report(diags, span, format!("`{name}` is a view op: views are never saved, their base is; save the op that produces the base instead"));
                continue;
            }
            if policy.is_offload() && info.view {
                report(diags, span, format!("`{name}` is a view op: views are never offloaded, their base is; offload the op that produces the base instead"));
                continue;
            }
            if resolved.iter().any(|(k, _)| *k == info.kind) {
                report(diags, span, format!("`{name}` is listed twice in `{key}`"));
                continue;
            }
            resolved.push((info.kind, span));
        }
        resolved
    }
}

fn kinds<S>(ops: Vec<(OpKind, &S)>) -> Vec<OpKind> {
    ops.into_iter().map(|(k, _)| k).collect()
}

/// Op kind names: plain identifiers.
fn op_names<'a, S: Clone>(args: &'a [Expr<S>], diags: &mut Diagnostics<S>) -> Vec<(&'a str, &'a S)> {
    let mut ops = Vec::new();
    for arg in args {
        match arg {
            Expr::Ident(name, span) => ops.push((name.as_str(), span)),
            Expr::Str(s, span) => report(diags, span, format!("write op kinds without quotes: `{s}`")),
            other => report(diags, other.span(), "expected an op kind, such as `matmul`"),
        }
    }
    ops
}

/// The string literals of `save_names(..)` / `offload_names(..)` (`form`).
fn value_names<S: Clone>(form: &str, args: &[Expr<S>], whole: &S, diags: &mut Diagnostics<S>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    if args.is_empty() {
        report(diags, whole, format!("`{form}()` lists no name; name at least one, as in `{form}(\"attn\")`"));
    }
    for arg in args {
        match arg {
            Expr::Str(value, span) => {
                if value.is_empty() {
                    report(diags, span, "an empty name matches no value; write the name given with `.name(..)`");
                } else if names.contains(value) {
                    report(diags, span, format!("`\"{value}\"` is listed twice in `{form}(..)`"));
                } else {
                    names.push(value.clone());
                }
            }
            Expr::Ident(ident, span) => report(
                diags,
                span,
                format!("`{form}` takes string literals; write `\"{ident}\"` to match `.name(\"{ident}\")`"),
            ),
            other => report(
                diags,
                other.span(),
                format!("`{form}` takes string literals naming values, as in `{form}(\"attn\")`"),
            ),
        }
    }
    names
}

fn rules<S: Clone>(args: &[Expr<S>], resolved: &mut Resolved, diags: &mut Diagnostics<S>) {
    let mut seen: Vec<&str> = Vec::new();
    let keys = || kw::POLICIES.iter().copied().chain([kw::DEFAULT]);
    // Which list each op kind went to first, for conflicts.
    let mut placed: Vec<(OpKind, Policy)> = Vec::new();
    for arg in args {
        let Expr::Assign { key, value, span: whole } = arg else {
            let forms = one_of(policy_names(" = [..]").chain(["`default = ..`".to_string()]));
            report(diags, arg.span(), format!("expected {forms}"));
            continue;
        };
        let Some((name, key_span)) = key.ident() else {
            report(diags, key.span(), "expected a key of `rules(..)`");
            continue;
        };
        if !keys().any(|k| k == name) {
            let hint = did_you_mean(name, keys());
            let hint = if hint.is_empty() {
                format!("; expected {}", one_of(policy_names("").chain(["`default`".to_string()])))
            } else {
                hint
            };
            report(diags, key_span, format!("unknown key `{name}` in `rules(..)`{hint}"));
            continue;
        }
        if seen.contains(&name) {
            report(diags, key_span, format!("duplicate `{name}` in `rules(..)`; give it once"));
            continue;
        }
        seen.push(name);
        if name == kw::DEFAULT {
            match &**value {
                Expr::Ident(ident, span) => match Policy::from_name(ident) {
                    Some(policy) => resolved.default = policy,
                    None => {
                        let hint = did_you_mean(ident, kw::POLICIES.iter().copied());
                        report(
                            diags,
                            span,
                            format!("unknown default policy `{ident}`{hint}; expected {}", policy_words()),
                        );
                    }
                },
                other => report(diags, other.span(), format!("expected a policy: {}", policy_words())),
            }
            continue;
        }
        let index = kw::POLICIES.iter().position(|p| *p == name).expect("checked above");
        let policy = POLICY_ORDER[index];
        let items = match &**value {
            Expr::List(elems, _) => op_names(elems, diags),
            Expr::Ident(op, _) => {
                report(diags, value.span(), format!("expected a list; write `{name} = [{op}]`"));
                continue;
            }
            other => {
                report(diags, other.span(), format!("expected a list of op kinds, as in `{name} = [matmul]`"));
                continue;
            }
        };
        let list = OpList { key: name, items, whole };
        let mut kept = Vec::new();
        for (kind, span) in list.resolve(policy, "or remove the key", diags) {
            match placed.iter().find(|(k, _)| *k == kind) {
                Some((_, first)) => report(
                    diags,
                    span,
                    format!(
                        "`{}` is in both `{}` and `{}`; an op kind has one policy, keep it in one list",
                        kind.name(),
                        first.name(),
                        policy.name()
                    ),
                ),
                None => {
                    placed.push((kind, policy));
                    kept.push(kind);
                }
            }
        }
        resolved.lists[index] = kept;
    }
}

// ---- The run-time front end: a policy read from a string ----

/// A policy string that does not parse or does not resolve: every problem, with where it is.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyError {
    text: String,
    problems: Vec<Diagnostic<Range<usize>>>,
}

impl PolicyError {
    /// The text that was read.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Every problem: the byte range it is about and the message (the same message the
    /// `#[checkpoint]` and `policy!` macros give at compile time).
    pub fn problems(&self) -> &[Diagnostic<Range<usize>>] {
        &self.problems
    }
}

impl fmt::Display for PolicyError {
    /// `invalid policy `save(matmull)`: unknown op kind ..`, then the text with each problem
    /// underlined.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let messages: Vec<&str> = self.problems.iter().map(|p| p.message.as_str()).collect();
        write!(f, "invalid policy `{}`: {}", self.text, messages.join("; and "))?;
        if !self.text.contains('\n') {
            for p in &self.problems {
                let start = self.text[..p.span.start.min(self.text.len())].chars().count();
                let width = self.text.get(p.span.clone()).map_or(1, |s| s.chars().count().max(1));
                write!(f, "\n    {}\n    {}{} {}", self.text, " ".repeat(start), "^".repeat(width), p.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for PolicyError {}

/// Checks a budget given as a value (`RegionPolicy::with_budget`) as the parser checks
/// `budget = f`: a fraction in [0, 1]; the error reads like the parser's.
pub fn check_budget(budget: f64) -> Result<f64, PolicyError> {
    let text = format!("budget = {budget:?}");
    let mut diags = Vec::new();
    let value = Expr::Number(budget, "budget = ".len()..text.len());
    match resolve_budget(&value, &mut diags) {
        Some(b) => Ok(b),
        None => Err(PolicyError { text, problems: diags }),
    }
}

/// Reads a policy from text: one form as written in `#[checkpoint(policy = ..)]`, optionally
/// preceded by `policy =` and followed by `, budget = f`:
///
/// ```
/// use remat_catalog::{forms, OpKind, Policy};
/// let spec = forms::parse("save(matmul), budget = 0.5").unwrap();
/// assert_eq!(spec.policy.lists[0], vec![OpKind::Matmul]);
/// assert_eq!(spec.budget, Some(0.5));
/// assert_eq!(forms::parse("policy = save_all").unwrap().policy.default, Policy::PreferSave);
/// let err = forms::parse("save(matmull)").unwrap_err();
/// assert!(err.to_string().contains("unknown op kind `matmull`; did you mean `matmul`?"));
/// ```
pub fn parse(text: &str) -> Result<Spec, PolicyError> {
    let fail = |problems| PolicyError { text: text.to_string(), problems };
    let tokens = lex(text).map_err(|d| fail(vec![d]))?;
    let mut parser = Parser { tokens: &tokens, pos: 0, end: text.len(), depth: 0 };
    let items = parser.items().map_err(|d| fail(vec![d]))?;
    let mut diags = Vec::new();
    let spec = resolve_items(&items, &(0..text.len()), &mut diags);
    if diags.is_empty() {
        Ok(spec)
    } else {
        Err(fail(diags))
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Number(f64),
    Punct(char),
}

/// Tokens with their byte ranges.
type Tokens = Vec<(Tok, Range<usize>)>;

fn lex(text: &str) -> Result<Tokens, Diagnostic<Range<usize>>> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    let problem = |span: Range<usize>, message: String| Diagnostic { span, message };
    while i < bytes.len() {
        let c = text[i..].chars().next().expect("in bounds");
        let start = i;
        if c.is_whitespace() {
            i += c.len_utf8();
        } else if c.is_ascii_alphabetic() || c == '_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push((Tok::Ident(text[start..i].to_string()), start..i));
        } else if c.is_ascii_digit() || c == '.' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.' || bytes[i] == b'_') {
                i += 1;
            }
            let written = &text[start..i];
            let value = written
                .replace('_', "")
                .parse::<f64>()
                .map_err(|_| problem(start..i, format!("`{written}` is not a number")))?;
            out.push((Tok::Number(value), start..i));
        } else if c == '"' {
            i += 1;
            let mut value = String::new();
            loop {
                let Some(ch) = text[i..].chars().next() else {
                    return Err(problem(start..text.len(), "unterminated string; close it with `\"`".into()));
                };
                i += ch.len_utf8();
                match ch {
                    '"' => break,
                    '\\' => {
                        let Some(esc) = text[i..].chars().next() else { continue };
                        i += esc.len_utf8();
                        value.push(esc);
                    }
                    ch => value.push(ch),
                }
            }
            out.push((Tok::Str(value), start..i));
        } else if "()[],=-".contains(c) {
            i += 1;
            out.push((Tok::Punct(c), start..i));
        } else {
            i += c.len_utf8();
            return Err(problem(start..i, format!("unexpected `{c}` in a policy")));
        }
    }
    Ok(out)
}

struct Parser<'a> {
    tokens: &'a [(Tok, Range<usize>)],
    pos: usize,
    end: usize,
    /// Expressions open around the current one (calls, lists, `key = value`), bounded by
    /// [`MAX_DEPTH`] so that no text can exhaust the stack.
    depth: usize,
}

/// The deepest nesting a policy may have; real policies use three levels (`rules(k = [op])`).
pub const MAX_DEPTH: usize = 64;

type Parsed<T> = Result<T, Diagnostic<Range<usize>>>;

impl Parser<'_> {
    fn peek(&self) -> Option<&(Tok, Range<usize>)> {
        self.tokens.get(self.pos)
    }

    fn here(&self) -> Range<usize> {
        self.peek().map_or(self.end..self.end, |(_, s)| s.clone())
    }

    fn eat(&mut self, c: char) -> bool {
        if matches!(self.peek(), Some((Tok::Punct(p), _)) if *p == c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn error<T>(&self, message: impl Into<String>) -> Parsed<T> {
        Err(Diagnostic { span: self.here(), message: message.into() })
    }

    /// `expr (, expr)* ,?` up to the end.
    fn items(&mut self) -> Parsed<Vec<Expr<Range<usize>>>> {
        let items = self.list_until(None)?;
        match self.peek() {
            None => Ok(items),
            Some(_) => self.error("expected `,` or the end of the policy"),
        }
    }

    /// Comma-separated expressions until `close` (consumed) or the end.
    fn list_until(&mut self, close: Option<char>) -> Parsed<Vec<Expr<Range<usize>>>> {
        let mut items = Vec::new();
        loop {
            match (close, self.peek()) {
                (None, None) => return Ok(items),
                (Some(c), Some((Tok::Punct(p), _))) if *p == c => {
                    self.pos += 1;
                    return Ok(items);
                }
                (Some(c), None) => return self.error(format!("expected `{c}`")),
                _ => {}
            }
            items.push(self.expr()?);
            if !self.eat(',') {
                match (close, self.peek()) {
                    (Some(c), Some((Tok::Punct(p), _))) if *p == c => {}
                    (None, None) => {}
                    (Some(c), _) => return self.error(format!("expected `,` or `{c}`")),
                    (None, Some(_)) => return Ok(items),
                }
            }
        }
    }

    fn expr(&mut self) -> Parsed<Expr<Range<usize>>> {
        if self.depth >= MAX_DEPTH {
            return self.error(format!("the policy is nested more than {MAX_DEPTH} levels deep"));
        }
        self.depth += 1;
        let expr = self.assignment();
        self.depth -= 1;
        expr
    }

    fn assignment(&mut self) -> Parsed<Expr<Range<usize>>> {
        let left = self.primary()?;
        if self.eat('=') {
            let value = self.expr()?;
            let span = left.span().start..value.span().end;
            return Ok(Expr::Assign { key: Box::new(left), value: Box::new(value), span });
        }
        Ok(left)
    }

    fn primary(&mut self) -> Parsed<Expr<Range<usize>>> {
        let Some((tok, span)) = self.peek().cloned() else {
            return self.error("expected a policy form, an op kind, a name or a number");
        };
        self.pos += 1;
        Ok(match tok {
            Tok::Ident(name) => {
                if self.eat('(') {
                    let args = self.list_until(Some(')'))?;
                    let end = self.tokens[self.pos - 1].1.end;
                    Expr::Call { func: Box::new(Expr::Ident(name, span.clone())), args, span: span.start..end }
                } else {
                    Expr::Ident(name, span)
                }
            }
            Tok::Str(s) => Expr::Str(s, span),
            Tok::Number(n) => Expr::Number(n, span),
            Tok::Punct('-') => match self.peek().cloned() {
                Some((Tok::Number(n), s)) => {
                    self.pos += 1;
                    Expr::Number(-n, span.start..s.end)
                }
                _ => Expr::Other(span),
            },
            Tok::Punct('[') => {
                let elems = self.list_until(Some(']'))?;
                let end = self.tokens[self.pos - 1].1.end;
                Expr::List(elems, span.start..end)
            }
            Tok::Punct(c) => {
                self.pos -= 1;
                return self.error(format!("unexpected `{c}`"));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str) -> String {
        let err = parse(text).unwrap_err();
        err.problems().iter().map(|p| format!("{}@{:?}", p.message, p.span)).collect::<Vec<_>>().join(" | ")
    }

    #[test]
    fn every_form_parses() {
        assert_eq!(parse("recompute_all").unwrap(), Spec::default());
        assert_eq!(parse(" save_all ").unwrap().policy.default, Policy::PreferSave);
        let s = parse("save(matmul, gelu)").unwrap().policy;
        assert_eq!(s.lists[0], vec![OpKind::Matmul, OpKind::Gelu]);
        let r = parse("recompute(gelu)").unwrap().policy;
        assert_eq!((r.lists[2].clone(), r.default), (vec![OpKind::Gelu], Policy::PreferSave));
        assert_eq!(parse(r#"save_names("attn", "ffn")"#).unwrap().policy.save_names, vec!["attn", "ffn"]);
        let rules = parse("rules(must_save = [matmul], must_recompute = [softmax,], default = prefer_save)").unwrap();
        assert_eq!(rules.policy.lists[0], vec![OpKind::Matmul]);
        assert_eq!(rules.policy.lists[2], vec![OpKind::Softmax]);
        assert_eq!(rules.policy.default, Policy::PreferSave);
        assert_eq!(parse("policy = save_all, budget = 0.25").unwrap().budget, Some(0.25));
        assert_eq!(parse("save_all, budget = 1").unwrap().budget, Some(1.0));
    }

    #[test]
    fn mistakes_get_the_macro_messages_with_their_place() {
        assert_eq!(message("save(matmull)"), "unknown op kind `matmull`; did you mean `matmul`?@5..12");
        assert_eq!(message("sav_all"), "unknown policy `sav_all`; did you mean `save_all`?@0..7");
        assert!(message("save(reshape)").starts_with("`reshape` is a view op"));
        assert!(message("save()").starts_with("`save()` lists no op kind"));
        assert!(message("save_all, budget = 2").contains("got 2.0@19..20"));
        assert!(message("save_all, budget = -0.5").contains("got -0.5@19..23"));
        assert!(message("save_names(attn)").contains("write `\"attn\"`"));
        assert!(message("rules(must_save = [matmul], prefer_save = [matmul])").contains("is in both"));
        assert!(message("save_all, budgt = 0.5").contains("unknown key `budgt` in a policy; did you mean `budget`?"));
        assert!(message("").starts_with("no policy given"));
        assert!(message("save(matmul").starts_with("expected `,` or `)`"));
        assert!(message("save(matmul) gelu").starts_with("expected `,` or the end"));
        assert!(message("save(%)").starts_with("unexpected `%`"));
        assert!(message(r#"save_names("attn)"#).starts_with("unterminated string"));
        // Several problems at once.
        assert_eq!(parse("save(matmull, reshape), budget = 3").unwrap_err().problems().len(), 3);
    }

    #[test]
    fn the_policy_words_follow_the_policy_order() {
        let names: Vec<&str> = POLICY_ORDER.iter().map(|p| p.name()).collect();
        assert_eq!(names, kw::POLICIES);
        for (i, p) in POLICY_ORDER.iter().enumerate() {
            assert_eq!(list_index(*p), i);
        }
    }

    #[test]
    fn offload_forms_parse() {
        let o = parse("offload(matmul, gelu)").unwrap().policy;
        assert_eq!(o.lists[list_index(Policy::MustOffload)], vec![OpKind::Matmul, OpKind::Gelu]);
        assert_eq!(o.default, Policy::PreferRecompute);
        assert!(o.lists.iter().enumerate().all(|(i, l)| i == list_index(Policy::MustOffload) || l.is_empty()));
        let n = parse(r#"offload_names("attn")"#).unwrap().policy;
        assert_eq!((n.offload_names, n.save_names), (vec!["attn".to_string()], vec![]));
        let r = parse(
            "rules(must_save = [matmul], must_offload = [gelu], prefer_offload = [softmax], default = prefer_offload)",
        )
        .unwrap()
        .policy;
        assert_eq!(r.lists[list_index(Policy::MustOffload)], vec![OpKind::Gelu]);
        assert_eq!(r.lists[list_index(Policy::PreferOffload)], vec![OpKind::Softmax]);
        assert_eq!(r.default, Policy::PreferOffload);
    }

    #[test]
    fn rules_messages_list_every_key() {
        assert_eq!(
            message("rules(matmul)"),
            "expected `must_save = [..]`, `prefer_save = [..]`, `must_recompute = [..]`, `prefer_recompute = [..]`, \
             `must_offload = [..]`, `prefer_offload = [..]` or `default = ..`@6..12"
        );
        assert_eq!(
            message("rules(frobnicate = [matmul])"),
            "unknown key `frobnicate` in `rules(..)`; expected `must_save`, `prefer_save`, `must_recompute`, \
             `prefer_recompute`, `must_offload`, `prefer_offload` or `default`@6..16"
        );
    }

    #[test]
    fn offload_mistakes() {
        assert!(message("offload(reshape)").starts_with("`reshape` is a view op: views are never offloaded"));
        assert!(message("rules(prefer_offload = [transpose])").contains("never offloaded"));
        let both = message("rules(must_save = [matmul], prefer_offload = [matmul])");
        assert!(both.contains("`matmul` is in both `must_save` and `prefer_offload`"), "{both}");
        assert!(message("offload()").starts_with("`offload()` lists no op kind"));
        assert!(message("offload_names()").starts_with("`offload_names()` lists no name"));
        assert!(message("offload_names(attn)").contains("`offload_names` takes string literals"));
        assert!(message(r#"offload_names("a", "a")"#).contains("listed twice in `offload_names(..)`"));
        assert!(message("ofload(matmul)").contains("did you mean `offload`?"));
        assert!(message("rules(must_ofload = [matmul])").contains("did you mean `must_offload`?"));
        assert!(message("rules(default = keep)").contains("`prefer_recompute`, `must_offload` or `prefer_offload`"));
    }

    #[test]
    fn nesting_is_bounded_without_exhausting_the_stack() {
        for open in ["[", "save(", "a = "] {
            let text = open.repeat(100_000);
            assert!(message(&text).contains("nested more than 64 levels deep"), "{open}");
        }
        assert!(parse(&format!("save({}matmul{})", "[".repeat(10), "]".repeat(10))).is_err());
        assert_eq!(check_budget(0.5).unwrap(), 0.5);
        let err = check_budget(2.0).unwrap_err().to_string();
        assert!(err.contains("`budget` must be in [0, 1]") && err.contains("got 2.0"), "{err}");
        assert!(check_budget(f64::NAN).is_err());
    }

    #[test]
    fn the_error_underlines_the_problem() {
        let text = parse("save(matmull)").unwrap_err().to_string();
        assert!(text.contains("\n    save(matmull)\n         ^^^^^^^ unknown op kind"), "{text}");
    }
}
