//! A quick pass over a document's top level: the text of each field's value, found without
//! parsing the values, so that a 10⁶-node `nodes` list is parsed once (by the node reader) rather
//! than twice (it is a third of the reading time).
//!
//! The pass checks only the top level's own punctuation; every value it finds is parsed in full
//! by whoever reads it. Where it meets anything it does not expect it gives up, and the caller
//! parses the text with serde_json, whose errors are the ones reported.

use std::collections::BTreeMap;

/// Each top-level field's name and the text of its value, or `None` where the top level is not
/// an object of that shape (the caller then parses the text with serde_json). A field listed
/// twice keeps its last value, as serde_json's map does.
pub(super) fn fields(text: &str) -> Option<BTreeMap<String, &str>> {
    let b = text.as_bytes();
    let mut i = skip_space(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_space(b, i + 1);
    let mut fields = BTreeMap::new();
    if b.get(i) == Some(&b'}') {
        return (skip_space(b, i + 1) == b.len()).then_some(fields);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(b, i)?;
        let key: String = serde_json::from_str(&text[i..key_end]).ok()?;
        i = skip_space(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_space(b, i + 1);
        let value_end = value_end(b, i)?;
        fields.insert(key, &text[i..value_end]);
        i = skip_space(b, value_end);
        match b.get(i) {
            Some(b',') => i = skip_space(b, i + 1),
            Some(b'}') => return (skip_space(b, i + 1) == b.len()).then_some(fields),
            _ => return None,
        }
    }
}

/// The first position at or after `i` that is not JSON whitespace.
fn skip_space(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The position after the string that opens at `i` (a `"`), or `None` where it never closes.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match b.get(j)? {
            b'"' => return Some(j + 1),
            b'\\' => j += 2,
            _ => j += 1,
        }
    }
}

/// The position after the value that starts at `i`: a string, an array or object (brackets
/// counted outside strings), or a number or literal (up to the next delimiter).
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'[' | b'{' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let end = (i..b.len()).find(|&j| matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            let end = end.unwrap_or(b.len());
            (end > i).then_some(end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fields;
    use serde_json::value::RawValue;
    use std::collections::BTreeMap;

    /// What serde_json makes of the top level, as field texts.
    fn by_serde(text: &str) -> Option<BTreeMap<String, &str>> {
        let map: BTreeMap<String, &RawValue> = serde_json::from_str(text).ok()?;
        Some(map.into_iter().map(|(k, v)| (k, v.get())).collect())
    }

    #[test]
    fn finds_the_fields_serde_json_finds() {
        let docs = [
            r#"{"format": "remat.joint", "version": 1, "nodes": [{"id": "a", "op": "x"}], "forward_outputs": ["a"]}"#,
            "  {\n\"a\"\t:\r[ ] , \"b\":{\"c\": [1, {\"d\": \"]}\\\"[{\"}]} }  \n",
            r#"{"k\u0065y": "v\\", "n": -1.5e3, "t": true, "z": null, "e": "", "o": {}}"#,
            r#"{"dup": 1, "dup": [2]}"#,
            "{}",
            r#"{"a": "é ü 字", "b": ["\\\\", "\""]}"#,
        ];
        for text in docs {
            assert_eq!(fields(text), by_serde(text), "{text}");
            assert!(fields(text).is_some(), "{text}");
        }
    }

    #[test]
    fn gives_up_where_the_top_level_is_not_an_object_of_fields() {
        let docs = [
            "",
            "[]",
            r#"{"a": 1"#,
            r#"{"a": 1} x"#,
            r#"{"a" 1}"#,
            r#"{"a": 1,}"#,
            r#"{a: 1}"#,
            r#"{"a": [1, 2}"#,
            r#"{"a": "unclosed}"#,
            r#"{"a": }"#,
            r#"{"a": 1 "b": 2}"#,
            r#"{"\x": 1}"#,
        ];
        for text in docs {
            assert_eq!(fields(text), None, "{text}");
        }
    }

    #[test]
    fn agrees_with_serde_json_on_every_cut_of_a_document() {
        // Each prefix, and the text with each byte dropped: the pass either finds what serde_json
        // finds or gives up — it never accepts a top level serde_json rejects, except inside a
        // value (which is parsed in full later).
        let text = r#"{"format": "remat.graph", "version": 1, "nodes": [{"id": 0, "op": "input", "shape": [2], "name": "x\"]"}], "outputs": [0]}"#;
        let mut cuts: Vec<String> = (0..text.len()).map(|n| text[..n].to_string()).collect();
        cuts.extend((0..text.len()).map(|n| format!("{}{}", &text[..n], &text[n + 1..])));
        for cut in &cuts {
            let Some(found) = fields(cut) else { continue };
            if let Some(expected) = by_serde(cut) {
                assert_eq!(found, expected, "{cut}");
            } else {
                // serde_json rejects it: then some value is not JSON, which its reader finds.
                assert!(found.values().any(|v| serde_json::from_str::<&RawValue>(v).is_err()), "{cut}");
            }
        }
    }
}
