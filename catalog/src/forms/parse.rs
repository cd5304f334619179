//! The run-time front end: a policy read from a string (a flag, a config file), lexed and parsed
//! into the same syntax tree as the macros build, spanned by byte ranges.

use super::resolve::{resolve_budget, resolve_items, Spec};
use super::syntax::{Diagnostic, Expr};
use std::fmt;
use std::ops::Range;

/// A policy string that does not parse or does not resolve: every problem, with where it is.
///
/// `Debug` prints what `Display` prints, so `fn main() -> Result<(), PolicyError>` shows the
/// message and the underlined text rather than the struct.
#[derive(Clone, PartialEq)]
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

impl fmt::Debug for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

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
