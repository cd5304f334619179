//! Typed reading of one node object, with errors a person can act on: the node's id and op, the
//! field, what was expected and what was found, and the nearest field for an unknown one.

use super::top_error;
use crate::error::{Error, Result};
use crate::partition::DocId;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::mpsc::{Receiver, SyncSender};

/// A node id as written: borrowed from the text where it can be.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) enum IdRef<'a> {
    Int(u64),
    Str(Cow<'a, str>),
}

impl IdRef<'_> {
    pub fn owned(&self) -> DocId {
        match self {
            IdRef::Int(i) => DocId::Index(*i),
            IdRef::Str(s) => DocId::Name((**s).into()),
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for IdRef<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = IdRef<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or a non-negative integer")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
                Ok(IdRef::Int(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
                u64::try_from(v).map(IdRef::Int).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> std::result::Result<Self::Value, E> {
                Ok(IdRef::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
                Ok(IdRef::Str(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

/// An optional string field, borrowed from the text where it can be (it has no escapes). Serde's
/// own `Option<Cow<str>>` copies every string whatever `borrow` says (the attribute does not
/// reach inside an `Option`): an allocation and a free per name and dtype.
pub(super) fn borrowed<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Cow<'a, str>>, D::Error> {
    struct Text;
    impl<'de> Visitor<'de> for Text {
        type Value = Cow<'de, str>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Borrowed(v))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v))
        }
    }
    struct Optional;
    impl<'de> Visitor<'de> for Optional {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_none<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
            d.deserialize_str(Text).map(Some)
        }
    }
    d.deserialize_option(Optional)
}

/// What a node field holds, for "expected ..." in errors.
pub(super) fn expected(field: &str) -> &'static str {
    match field {
        "id" | "grad_of" => "a string or a non-negative integer",
        "inputs" => "an array of node ids (strings or non-negative integers)",
        "shape" => "an array of non-negative integers",
        "phase" => "\"forward\" or \"backward\"",
        "bytes" | "flops" | "region" => "a non-negative integer",
        "flags" => "an array of flag names",
        "attrs" => "an object of attributes",
        _ => "a string",
    }
}

/// A short rendering of a JSON value for "got ..." in errors.
fn got(value: Option<&Value>) -> String {
    match value {
        None => "nothing".into(),
        Some(v) => crate::text::shorten(&super::spaced(v), 40),
    }
}

/// The value at a serde path (`shape`, `inputs[2]`) inside a node object.
fn lookup<'v>(node: &'v Value, path: &serde_path_to_error::Path) -> Option<&'v Value> {
    use serde_path_to_error::Segment;
    let mut v = node;
    for seg in path.iter() {
        v = match seg {
            Segment::Map { key } => v.get(key)?,
            Segment::Seq { index } => v.get(index)?,
            _ => return Some(v),
        };
    }
    Some(v)
}

/// The first top-level field of a path.
fn field_of(path: &serde_path_to_error::Path) -> Option<String> {
    path.iter().find_map(|seg| match seg {
        serde_path_to_error::Segment::Map { key } => Some(key.clone()),
        _ => None,
    })
}

/// Reads the `nodes` array as `T`s in one pass; on a failure, node by node, so the error names
/// the node at fault.
pub(super) fn nodes<'a, T: Deserialize<'a>>(raw: &'a str, format: &str, fields: &[&'static str]) -> Result<Vec<T>> {
    if let Ok(all) = serde_json::from_str(raw) {
        return Ok(all);
    }
    let each: Vec<&'a RawValue> = serde_json::from_str(raw)
        .map_err(|e| top_error(format!("{format}: field `nodes`: expected an array of node objects ({e})")))?;
    each.iter().enumerate().map(|(k, raw)| node(raw, k, fields)).collect()
}

/// Reads the `nodes` array in one pass, handing each node to `each` (with its position) as soon
/// as it is parsed, so that no list of parsed nodes is ever held. The first error `each` returns
/// stops the pass and is returned; a node that does not parse is found and described node by
/// node, as [`nodes`] does.
pub(super) fn each_node<'a, T: Deserialize<'a>>(
    raw: &'a str,
    format: &str,
    fields: &[&'static str],
    mut each: impl FnMut(usize, T) -> Result<()>,
) -> Result<()> {
    struct Seq<'f, F, T> {
        each: &'f mut F,
        failed: &'f mut Option<Error>,
        item: std::marker::PhantomData<fn() -> T>,
    }
    impl<'de, T: Deserialize<'de>, F: FnMut(usize, T) -> Result<()>> Visitor<'de> for Seq<'_, F, T> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an array of node objects")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
            let mut k = 0;
            while let Some(t) = seq.next_element::<T>()? {
                if let Err(e) = (self.each)(k, t) {
                    *self.failed = Some(e);
                    return Err(de::Error::custom("stopped"));
                }
                k += 1;
            }
            Ok(())
        }
    }
    impl<'de, T: Deserialize<'de>, F: FnMut(usize, T) -> Result<()>> de::DeserializeSeed<'de> for Seq<'_, F, T> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }
    let mut failed = None;
    let mut de = serde_json::Deserializer::from_str(raw);
    let seq = Seq { each: &mut each, failed: &mut failed, item: std::marker::PhantomData };
    let outcome = de::DeserializeSeed::deserialize(seq, &mut de).and_then(|()| de.end());
    match (failed, outcome) {
        (Some(e), _) => Err(e),
        (None, Ok(())) => Ok(()),
        // A node that does not parse: found and described by reading the nodes one by one.
        (None, Err(_)) => match nodes::<T>(raw, format, fields) {
            Err(e) => Err(e),
            Ok(_) => Err(top_error(format!("{format}: field `nodes`: the list does not parse"))),
        },
    }
}

/// Documents at least this large are parsed on a thread of their own while the caller's `each`
/// checks and stores the nodes already parsed (a large document's reading time is about half
/// each: docs/performance.md, "Reading").
const PIPELINE_FROM_BYTES: usize = 4 << 20;

/// Nodes handed from the parsing thread to the caller at a time.
const PIPELINE_BATCH: usize = 2048;

/// [`each_node`] in two stages: `prepare` runs on each node as it is parsed, then `each` on what
/// `prepare` made of it, both in list order. When the document is large and the machine has a
/// second CPU, parsing and `prepare` run on a second thread ahead of `each` on the calling one,
/// so work that needs only the nodes before (such as resolving ids) goes in `prepare`, and
/// `each` keeps what must see the graph as built so far.
///
/// Errors are those of the one-thread pass, where node `k` is prepared and then handed to
/// `each` before node `k + 1` is parsed: the first node in list order with any error names it,
/// and within a node `prepare`'s error comes first.
pub(super) fn each_node_pipelined<'a, T: Deserialize<'a>, U: Send>(
    raw: &'a str,
    format: &str,
    fields: &[&'static str],
    mut prepare: impl FnMut(usize, T) -> Result<U> + Send,
    mut each: impl FnMut(usize, U) -> Result<()>,
) -> Result<()> {
    let one_pass = |prepare: &mut dyn FnMut(usize, T) -> Result<U>, each: &mut dyn FnMut(usize, U) -> Result<()>| {
        each_node(raw, format, fields, |k, t| each(k, prepare(k, t)?))
    };
    if raw.len() < PIPELINE_FROM_BYTES {
        return one_pass(&mut prepare, &mut each);
    }
    let produce = |tx: SyncSender<Vec<(usize, U)>>| {
        let mut batch = Vec::with_capacity(PIPELINE_BATCH);
        let parsed = each_node(raw, format, fields, |k, t| {
            batch.push((k, prepare(k, t)?));
            if batch.len() == PIPELINE_BATCH {
                let full = std::mem::replace(&mut batch, Vec::with_capacity(PIPELINE_BATCH));
                // The caller stopped at an error of its own, which is the one returned.
                tx.send(full).map_err(|_| top_error("stopped".into()))?;
            }
            Ok(())
        });
        // Nodes prepared before a failure are still checked: an error among them comes first.
        let _ = tx.send(batch);
        parsed
    };
    let consume = |rx: Receiver<Vec<(usize, U)>>| {
        for batch in rx {
            for (k, u) in batch {
                each(k, u)?;
            }
        }
        Ok(())
    };
    match crate::concurrent::pipeline(8, produce, consume) {
        Some((parsed, checked)) => checked.and(parsed),
        None => one_pass(&mut prepare, &mut each),
    }
}

/// Reads node object `raw` (position `k`) as `T`, whose fields are `fields`. Errors name the
/// node by its id and op.
pub(super) fn node<'a, T: Deserialize<'a>>(raw: &'a RawValue, k: usize, fields: &[&'static str]) -> Result<T> {
    // The fast path reads without tracking paths; only a failure is read again to say where.
    if let Ok(t) = serde_json::from_str(raw.get()) {
        return Ok(t);
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    match serde_path_to_error::deserialize::<_, T>(&mut de) {
        Ok(t) => Ok(t),
        Err(e) => Err(node_error(raw, k, fields, e)),
    }
}

fn node_error(
    raw: &RawValue,
    k: usize,
    fields: &[&'static str],
    e: serde_path_to_error::Error<serde_json::Error>,
) -> Error {
    // A string escape no string can hold fails the whole node: the node is read with it
    // replaced, so that the error can still name the node, the field and the escape.
    let surrogate = super::escape::at_error(raw.get(), e.inner());
    let value: Value = match surrogate {
        Some(_) => super::escape::without_lone_surrogates(raw.get()).and_then(|t| serde_json::from_str(&t).ok()),
        None => serde_json::from_str(raw.get()).ok(),
    }
    .unwrap_or(Value::Null);
    if !value.is_object() {
        return top_error(format!("nodes[{k}]: expected a node object, got {}", got(Some(&value))));
    }
    let path = e.path().to_string();
    let id = match value.get("id") {
        Some(Value::String(s)) if !(surrogate.is_some() && path == "id") => DocId::Name(s.as_str().into()),
        Some(v) if v.as_u64().is_some() => DocId::Index(v.as_u64().unwrap_or(0)),
        _ => DocId::Name(format!("nodes[{k}]").into()),
    };
    let op = value.get("op").and_then(Value::as_str).unwrap_or("?");
    // A name read with a replaced escape would echo what the document does not say.
    let name = value.get("name").and_then(Value::as_str).filter(|_| surrogate.is_none());
    let inner = e.inner().to_string();
    let message = if let Some(escape) = surrogate {
        format!("field \"{path}\": {}", super::escape::describe(escape))
    } else if let Some(name) = backticked(&inner).filter(|_| inner.starts_with("unknown field")) {
        super::unknown("field", &name, fields)
    } else if let Some(name) = backticked(&inner).filter(|_| inner.starts_with("missing field")) {
        format!("missing field \"{name}\" ({})", expected(&name))
    } else if let Some(field) = field_of(e.path()) {
        let detail = format!("expected {}, got {}", what_at(&field, e.path()), got(lookup(&value, e.path())));
        format!("field \"{field}\": {detail}")
    } else {
        crate::text::shorten(&inner, 200)
    };
    super::at_named(&id, op, name, message)
}

/// What one element of a field holds when the error is inside it (`inputs[2]`).
fn what_at(field: &str, path: &serde_path_to_error::Path) -> &'static str {
    let inside = path.iter().any(|s| matches!(s, serde_path_to_error::Segment::Seq { .. }));
    match (field, inside) {
        ("inputs", true) => "a node id (a string or a non-negative integer)",
        ("shape", true) => "a non-negative integer",
        ("flags", true) => "a flag name (a string)",
        _ => expected(field),
    }
}

/// The first `name` in a serde message like "unknown field `axis`, expected ...".
fn backticked(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Field<'a> {
        #[serde(default, borrow, deserialize_with = "borrowed")]
        x: Option<Cow<'a, str>>,
    }

    #[test]
    fn optional_strings_borrow_where_the_text_allows() {
        let read = |text: &'static str| serde_json::from_str::<Field<'static>>(text).map(|f| f.x);
        assert!(matches!(read(r#"{"x": "f32"}"#), Ok(Some(Cow::Borrowed("f32")))));
        // An escape must be undone: the string is a copy, and says what the text means.
        assert!(matches!(read(r#"{"x": "a\nb"}"#), Ok(Some(Cow::Owned(s))) if s == "a\nb"));
        assert!(matches!(read(r#"{"x": null}"#), Ok(None)));
        assert!(matches!(read("{}"), Ok(None)));
        let wrong = read(r#"{"x": 5}"#).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(wrong.contains("invalid type: integer `5`, expected a string"), "{wrong}");
    }
}
