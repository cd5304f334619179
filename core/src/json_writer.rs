//! A neutral JSON writer: serde_json with a space after `:` and `,`, and objects laid out one
//! field a line with each list one item a line. The documents (`json`) and the reports
//! (`report::json`) both write through it.

use serde::Serialize;

/// serde_json with a space after `:` and `,`: compact but readable, one node a line.
struct Spaced;

impl serde_json::ser::Formatter for Spaced {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

pub(crate) fn spaced<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    spaced_into(&mut out, value);
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// [`spaced`], appended to `out`.
fn spaced_into<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let mut ser = serde_json::Serializer::with_formatter(out, Spaced);
    value.serialize(&mut ser).expect("documents serialize to memory");
}

/// A field of a laid-out JSON object: one serialized value, a list with one item a line, or
/// such a list already written out ([`rows`]: in parts, each a run of whole items).
pub(crate) enum Field {
    Value(String),
    Lines(Vec<String>),
    Rows(Vec<String>),
}

/// Between two items of a list laid out one item a line.
const ROW_SEPARATOR: &str = ",\n    ";

/// A list laid out one item a line, `item_of` of each of `items` serialized straight into one
/// buffer (not a string per item, then joined: docs/performance.md, "Report"). A long
/// list is written in two halves at once where there is a second CPU (two parts, written out one
/// after the other: joined, the halves would be copied once more).
pub(crate) fn rows<S: Sync, T: Serialize>(items: &[S], item_of: impl Fn(&S) -> T + Sync) -> Field {
    let write = |part: &[S]| {
        let mut out = Vec::new();
        for (k, item) in part.iter().enumerate() {
            if k > 0 {
                out.extend_from_slice(ROW_SEPARATOR.as_bytes());
            }
            spaced_into(&mut out, &item_of(item));
        }
        String::from_utf8(out).expect("serde_json writes UTF-8")
    };
    Field::Rows(if items.len() >= PARALLEL_ROWS {
        let (first, second) = items.split_at(items.len() / 2);
        let (first, second) = crate::concurrent::join(|| write(first), || write(second));
        vec![first, second]
    } else if items.is_empty() {
        Vec::new()
    } else {
        vec![write(items)]
    })
}

/// Lists at least this long are written by [`rows`] in two halves at once.
const PARALLEL_ROWS: usize = 50_000;

/// A JSON object with one field a line, and each list with one item a line (every value and
/// item already serialized by serde).
pub(crate) fn object(fields: Vec<(&str, Field)>) -> String {
    let size: usize = fields
        .iter()
        .map(|(key, field)| {
            key.len()
                + 16
                + match field {
                    Field::Value(v) => v.len(),
                    Field::Lines(items) | Field::Rows(items) => {
                        items.iter().map(|i| i.len() + ROW_SEPARATOR.len()).sum()
                    }
                }
        })
        .sum();
    let mut out = Vec::with_capacity(size + 4);
    write_object(&mut out, fields).expect("writing to memory does not fail");
    String::from_utf8(out).expect("every field is UTF-8")
}

/// [`object`], written to `out` as it is laid out rather than built first (large reports are
/// tens of megabytes).
pub(crate) fn write_object(out: &mut impl std::io::Write, fields: Vec<(&str, Field)>) -> std::io::Result<()> {
    out.write_all(b"{")?;
    write_fields(out, fields, true)?;
    out.write_all(b"\n}\n")
}

/// The fields of an object [`write_object`] writes, without its braces; `first` when none is
/// written before them.
pub(crate) fn write_fields(
    out: &mut impl std::io::Write,
    fields: Vec<(&str, Field)>,
    first: bool,
) -> std::io::Result<()> {
    for (k, (key, field)) in fields.into_iter().enumerate() {
        out.write_all(if first && k == 0 { b"\n  " } else { b",\n  " })?;
        out.write_all(spaced(key).as_bytes())?;
        out.write_all(b": ")?;
        match field {
            Field::Value(v) => out.write_all(v.as_bytes())?,
            Field::Lines(items) | Field::Rows(items) if items.is_empty() => out.write_all(b"[]")?,
            Field::Lines(items) | Field::Rows(items) => {
                out.write_all(b"[\n    ")?;
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        out.write_all(ROW_SEPARATOR.as_bytes())?;
                    }
                    out.write_all(item.as_bytes())?;
                }
                out.write_all(b"\n  ]")?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list long enough to be written in two halves reads as one written item by item.
    #[test]
    fn long_rows_are_the_items_in_order() {
        let items: Vec<(u32, String)> = (0..PARALLEL_ROWS as u32 * 2 + 3).map(|i| (i, format!("v{i}"))).collect();
        let Field::Rows(parts) = rows(&items, |(i, v)| serde_json::json!({"i": i, "v": v})) else { panic!("rows") };
        assert_eq!(parts.len(), 2);
        let expected: Vec<String> = items.iter().map(|(i, v)| spaced(&serde_json::json!({"i": i, "v": v}))).collect();
        assert_eq!(parts.join(ROW_SEPARATOR), expected.join(ROW_SEPARATOR));
    }
}
