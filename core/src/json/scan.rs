//! A quick pass over a document's top level: the text of each field's value, found without
//! parsing the values, so that a large `nodes` list is parsed once (by the node reader) rather
//! than twice (docs/performance.md, "Reading").
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
        b'[' | b'{' => bracketed_end(b, i),
        _ => {
            let end = (i..b.len()).find(|&j| matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            let end = end.unwrap_or(b.len());
            (end > i).then_some(end)
        }
    }
}

/// The position after the bracket that closes the one opening at `from` (outside strings);
/// `None` where a string or that bracket never closes, or a bracket closes none.
fn bracketed_end(b: &[u8], from: usize) -> Option<usize> {
    let (mut depth, mut j) = (0usize, from);
    while j < b.len() {
        match b[j] {
            b'"' => {
                j = string_end(b, j)?;
                continue;
            }
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            _ => {}
        }
        j += 1;
    }
    None
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

    /// A document of `nodes` node-like objects, one per line, whose strings hold brackets, escaped
    /// quotes and backslashes, and whose attributes nest; the `nodes` list starts at the returned
    /// position.
    fn long_document(nodes: usize, seed: u64) -> (String, usize) {
        let mut state = seed;
        let mut next = move |n: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let names = [r#"x\"]}"#, r#"{[\\"#, "plain", r#"\u005d\n"#, "é]字"];
        let mut text = String::from("{\"format\": \"remat.graph\", \"regions\": [{\"name\": \"r]\"}],\n\"nodes\": ");
        let start = text.len();
        text.push('[');
        for k in 0..nodes {
            let name = names[next(names.len() as u64) as usize];
            let depth = next(4) as usize;
            let attrs = format!("{}\"{name}\"{}", "[{\"a\": ".repeat(depth), "}]".repeat(depth));
            let sep = if k + 1 == nodes { "\n" } else { ",\n" };
            text.push_str(&format!(
                r#"{{"id": {k}, "op": "add", "inputs": [{}], "name": "{name}", "attrs": {{"v": {attrs}}}}}{sep}"#,
                next(9)
            ));
        }
        text.push_str("],\n\"outputs\": [0], \"tail\": {\"t\": [\"]]\"]}}\n");
        (text, start)
    }

    #[test]
    fn long_values_end_where_serde_json_ends_them() {
        for (nodes, seed) in [(3000, 1), (5000, 2), (9000, 3)] {
            let (text, start) = long_document(nodes, seed);
            let mut de = serde_json::Deserializer::from_str(&text[start..]);
            let list: &RawValue = serde::Deserialize::deserialize(&mut de).expect("the list is JSON");
            assert_eq!(super::value_end(text.as_bytes(), start), Some(start + list.get().len()), "{nodes} nodes");
            assert_eq!(fields(&text), by_serde(&text));
        }
    }

    #[test]
    fn broken_long_values_are_never_taken_for_what_serde_json_rejects() {
        let (text, start) = long_document(6000, 4);
        let middle = start + (text.len() - start) / 2;
        let line_break = middle + text[middle..].find('\n').expect("a line break past the middle");
        let quote = middle + text[middle..].find('"').expect("a string past the middle");
        let mut broken = vec![
            // Cut short: the list never closes, or a string never does.
            text[..text.len() / 2].to_string(),
            text[..quote + 1].to_string(),
            // A raw line break inside a string.
            format!("{}\"a{}", &text[..line_break], &text[line_break..]),
            format!("{}\n{}", &text[..quote + 1], &text[quote + 1..]),
        ];
        // One bracket more or fewer, early or late.
        for at in [start + 10, middle] {
            let close = at + text[at..].find(']').expect("a closing bracket");
            broken.push(format!("{}{}", &text[..close], &text[close + 1..]));
            broken.push(format!("{}]{}", &text[..close], &text[close..]));
        }
        assert_eq!(super::value_end(broken[0].as_bytes(), start), None, "cut short");
        assert_eq!(super::value_end(broken[1].as_bytes(), start), None, "a string cut short");
        for doc in &broken {
            // Whatever the pass makes of it, it never accepts what serde_json rejects at the top.
            if let (Some(found), Some(expected)) = (fields(doc), by_serde(doc)) {
                assert_eq!(found, expected);
            }
        }
    }
}
