//! A node's id as its document wrote it, and how reports and errors print it.

/// A node's id as its document wrote it: a non-negative integer or a string. Traced graphs use
/// the node's position.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DocId {
    /// An integer id (`12`), printed `%12`.
    Index(u64),
    /// A string id (`"addmm_1"`), printed quoted (a boxed `str`: the id is 16 bytes, not 24).
    Name(Box<str>),
}

impl DocId {
    /// The id as a JSON value of its own type.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            DocId::Index(i) => serde_json::Value::from(*i),
            DocId::Name(s) => serde_json::Value::from(&**s),
        }
    }

    /// The id for a table cell or a DOT label: `%12`, or the name bare (escaped, shortened) —
    /// quoted when it could be read as an integer id (`"%12"`, `"12"`) or is empty, so that the
    /// integer id `1` and the string id `"%1"` never print alike.
    pub fn label(&self) -> String {
        match self {
            DocId::Index(i) => format!("%{i}"),
            DocId::Name(s) if looks_positional(s) => crate::text::quoted(s),
            DocId::Name(s) => crate::text::shorten(s, crate::text::CELL),
        }
    }

    /// The id's text as the document wrote it (`12`, `addmm_1`), unescaped and whole.
    pub fn label_raw(&self) -> String {
        match self {
            DocId::Index(i) => i.to_string(),
            DocId::Name(s) => s.to_string(),
        }
    }

    /// The id as error messages write it after `node`: `12`, or `"addmm_1"` (escaped, shortened).
    pub fn in_error(&self) -> String {
        match self {
            DocId::Index(i) => i.to_string(),
            DocId::Name(s) => crate::text::quoted(s),
        }
    }
}

/// Whether a string id reads like an integer id (`%12`, `12`), or is empty.
fn looks_positional(s: &str) -> bool {
    let digits = s.strip_prefix('%').unwrap_or(s);
    digits.is_empty() || digits.bytes().all(|b| b.is_ascii_digit())
}

impl std::fmt::Display for DocId {
    /// `%12`, or `"addmm_1"` (quoted, escaped and shortened).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocId::Index(i) => write!(f, "%{i}"),
            DocId::Name(s) => f.write_str(&crate::text::quoted(s)),
        }
    }
}
