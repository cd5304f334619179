//! A quick pass over a document's top level: the text of each field's value, found without
//! parsing the values, so that a large `nodes` list is parsed once (by the node reader) rather
//! than twice (docs/performance.md, "Reading").
//!
//! The pass checks only the top level's own punctuation; every value it finds is parsed in full
//! by whoever reads it. Where it meets anything it does not expect it gives up, and the caller
//! parses the text with serde_json, whose errors are the ones reported.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

/// A bracketed value is walked alone for this many bytes; past them, the rest of the text is
/// walked in two halves at once where there is a second CPU (the pass runs before anything
/// else can: docs/performance.md, "Reading").
const ALONE: usize = 1 << 20;
/// How often (in bytes) the second half looks whether the first found the value's end already.
const LOOK_EVERY: usize = 1 << 16;

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
    value_end_with(b, i, ALONE)
}

/// [`value_end`], walking a bracketed value alone for `alone` bytes before it splits the rest.
fn value_end_with(b: &[u8], i: usize, alone: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'[' | b'{' => match walk(b, i, b.len().min(i.saturating_add(alone)), 0)? {
            Walked::Closed(end) => Some(end),
            Walked::Open(depth, at) => rest_end(b, at, depth),
        },
        _ => {
            let end = (i..b.len()).find(|&j| matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            let end = end.unwrap_or(b.len());
            (end > i).then_some(end)
        }
    }
}

/// Where a walk over brackets stopped.
enum Walked {
    /// Every bracket closed: the position after the last.
    Closed(usize),
    /// Brackets still open, and where the walk stopped (outside any string).
    Open(usize, usize),
}

/// Walks `b` from `from` (outside any string, `depth` brackets open) until every bracket is
/// closed, or to the first position at or past `to` outside a string; `None` where a string
/// never closes or a bracket closes none. Where `depth` is 0, the first byte opens one.
fn walk(b: &[u8], from: usize, to: usize, mut depth: usize) -> Option<Walked> {
    let mut j = from;
    loop {
        match next_bracket(b, j, to)? {
            Bracket::None(at) => return Some(Walked::Open(depth, at)),
            Bracket::Opens(at) => {
                depth += 1;
                j = at + 1;
            }
            Bracket::Closes(at) => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(Walked::Closed(at + 1));
                }
                j = at + 1;
            }
        }
    }
}

/// The next bracket outside strings from `j` on.
enum Bracket {
    Opens(usize),
    Closes(usize),
    /// None before `to`: the first position at or past it outside a string.
    None(usize),
}

/// The first bracket at or after `j` (outside any string) and before `to`; a string that opens
/// before `to` is skipped whole. `None` where a string never closes.
fn next_bracket(b: &[u8], mut j: usize, to: usize) -> Option<Bracket> {
    while j < to {
        match b[j] {
            b'"' => {
                j = string_end(b, j)?;
                continue;
            }
            b'[' | b'{' => return Some(Bracket::Opens(j)),
            b']' | b'}' => return Some(Bracket::Closes(j)),
            _ => j += 1,
        }
    }
    Some(Bracket::None(j))
}

/// The position after the bracket that closes the `depth` brackets open at `at` (outside any
/// string). A long rest is split at a line break past its middle — never inside a string, where
/// JSON allows no raw line break — and both halves are walked at once: the first as [`walk`]
/// does, the second noting where its brackets first close one level, two levels, ... below where
/// it began, so that whatever the first leaves open, the second says where it closes.
fn rest_end(b: &[u8], at: usize, depth: usize) -> Option<usize> {
    let split = (b.len() - at > 2 * LOOK_EVERY && crate::par::second_cpu())
        .then(|| {
            let middle = at + (b.len() - at) / 2;
            b[middle..].iter().position(|&c| c == b'\n').map(|k| middle + k)
        })
        .flatten();
    let Some(split) = split else { return closed(walk(b, at, b.len(), depth)?) };
    let found = AtomicBool::new(false);
    let (first, lows) = crate::par::join(
        || {
            let first = walk(b, at, split, depth);
            if !matches!(first, Some(Walked::Open(..))) {
                found.store(true, Ordering::Relaxed);
            }
            first
        },
        || lows(b, split, &found),
    );
    match first? {
        Walked::Closed(end) => Some(end),
        // The second half began where the first stopped: its lows go on from there.
        Walked::Open(depth, stopped) if stopped == split => lows?.get(depth - 1).copied(),
        // A string ran over the split (a raw line break inside it: not JSON): walked on alone.
        Walked::Open(depth, stopped) => closed(walk(b, stopped, b.len(), depth)?),
    }
}

/// The end of a walk to the end of the text, where it closed.
fn closed(walked: Walked) -> Option<usize> {
    match walked {
        Walked::Closed(end) => Some(end),
        Walked::Open(..) => None,
    }
}

/// From `from` (outside any string) to the end of `b`: the position after the bracket that
/// first closes one level below `from`'s, two levels, and so on; `None` where a string never
/// closes. Stops early (with what it found) once `stop` is set.
fn lows(b: &[u8], from: usize, stop: &AtomicBool) -> Option<Vec<usize>> {
    let (mut depth, mut lowest) = (0isize, 0isize);
    let mut lows = Vec::new();
    let mut j = from;
    let mut look_at = from + LOOK_EVERY;
    loop {
        let at = match next_bracket(b, j, b.len())? {
            Bracket::None(_) => return Some(lows),
            Bracket::Opens(at) => {
                depth += 1;
                at
            }
            Bracket::Closes(at) => {
                depth -= 1;
                if depth < lowest {
                    lowest = depth;
                    lows.push(at + 1);
                }
                at
            }
        };
        if at >= look_at {
            if stop.load(Ordering::Relaxed) {
                return Some(lows);
            }
            look_at = at + LOOK_EVERY;
        }
        j = at + 1;
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
    fn long_values_walked_in_halves_end_where_serde_json_ends_them() {
        for (nodes, seed) in [(3000, 1), (5000, 2), (9000, 3)] {
            let (text, start) = long_document(nodes, seed);
            assert!(text.len() > 4 * super::LOOK_EVERY, "long enough to be split");
            let b = text.as_bytes();
            let mut de = serde_json::Deserializer::from_str(&text[start..]);
            let list: &RawValue = serde::Deserialize::deserialize(&mut de).expect("the list is JSON");
            let expected = start + list.get().len();
            // Walked alone to the end, walked alone for a while then split, split at once.
            for alone in [usize::MAX, 100_000, 1000, 1, 0] {
                assert_eq!(super::value_end_with(b, start, alone), Some(expected), "{nodes} nodes, {alone} alone");
            }
            assert_eq!(fields(&text), by_serde(&text));
        }
    }

    #[test]
    fn broken_long_values_are_found_alike_split_or_not() {
        let (text, start) = long_document(6000, 4);
        let middle = start + (text.len() - start) / 2;
        let line_break = middle + text[middle..].find('\n').expect("a line break past the middle");
        let quote = middle + text[middle..].find('"').expect("a string past the middle");
        let mut broken = vec![
            // Cut short: the list never closes, or a string never does.
            text[..text.len() / 2].to_string(),
            text[..quote + 1].to_string(),
            // A raw line break inside a string, where the halves would split.
            format!("{}\"a{}", &text[..line_break], &text[line_break..]),
            format!("{}\n{}", &text[..quote + 1], &text[quote + 1..]),
        ];
        // One bracket more or fewer, before the split or after it.
        for at in [start + 10, middle] {
            let close = at + text[at..].find(']').expect("a closing bracket");
            broken.push(format!("{}{}", &text[..close], &text[close + 1..]));
            broken.push(format!("{}]{}", &text[..close], &text[close..]));
        }
        for doc in &broken {
            let alone = super::value_end_with(doc.as_bytes(), start, usize::MAX);
            for split_after in [0, 1000] {
                assert_eq!(super::value_end_with(doc.as_bytes(), start, split_after), alone);
            }
            // Whatever the pass makes of it, it never accepts what serde_json rejects at the top.
            if let (Some(found), Some(expected)) = (fields(doc), by_serde(doc)) {
                assert_eq!(found, expected);
            }
        }
    }
}
