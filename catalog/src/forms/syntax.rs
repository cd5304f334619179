//! The syntax tree both front ends build, spanned by where each piece was written, and the
//! diagnostics that point into it.

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

    pub(super) fn ident(&self) -> Option<(&str, &S)> {
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

pub(super) fn report<S: Clone>(diags: &mut Diagnostics<S>, span: &S, message: impl Into<String>) {
    diags.push(Diagnostic { span: span.clone(), message: message.into() });
}
