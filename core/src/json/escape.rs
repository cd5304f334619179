//! JSON string escapes no Rust string can hold: a lone UTF-16 surrogate (`"\ud800"`), which
//! Python's `json.dumps` writes for a string holding one. serde_json refuses them with a message
//! that names neither the escape nor, for a node, anything but the position; the readers find
//! the escape here to say which it is and in which field.

/// The lone surrogate escape serde_json stopped at reading JSON text `raw` with error `e` (the
/// last one before where it stopped), if that is what it stopped at: its text (`\ud800`).
pub(super) fn at_error<'r>(raw: &'r str, e: &serde_json::Error) -> Option<&'r str> {
    if !e.is_syntax() || e.line() == 0 {
        return None;
    }
    // serde_json counts lines from 1 and bytes within a line from 1.
    let line_start = match e.line() {
        1 => 0,
        n => raw.match_indices('\n').nth(n - 2)?.0 + 1,
    };
    let stop = line_start + e.column();
    lone_surrogates(raw).take_while(|&at| at < stop).last().map(|at| &raw[at..at + 6])
}

/// `raw` with every lone surrogate escape replaced by `\ufffd`, so that the rest of a node that
/// holds one can be read to name it; `None` when there is none.
pub(super) fn without_lone_surrogates(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut from = 0;
    for at in lone_surrogates(raw) {
        out.push_str(&raw[from..at]);
        out.push_str("\\ufffd");
        from = at + 6;
    }
    (from > 0).then(|| out + &raw[from..])
}

/// What is wrong with lone surrogate escape `escape` (`\ud800`), for a message.
pub(super) fn describe(escape: &str) -> String {
    let half = match u16::from_str_radix(&escape[2..], 16) {
        Ok(0xd800..=0xdbff) => "a high surrogate without the low one after it",
        _ => "a low surrogate without the high one before it",
    };
    format!("invalid escape {escape}: a lone surrogate ({half}), which no Unicode string can hold")
}

/// The offsets of the lone surrogate escapes inside the strings of `raw`, in order.
fn lone_surrogates(raw: &str) -> impl Iterator<Item = usize> + '_ {
    let bytes = raw.as_bytes();
    let mut k = 0;
    let mut in_string = false;
    std::iter::from_fn(move || {
        while k < bytes.len() {
            match bytes[k] {
                b'"' => {
                    in_string = !in_string;
                    k += 1;
                }
                b'\\' if in_string => match unit_at(bytes, k) {
                    Some(0xd800..=0xdbff) if matches!(unit_at(bytes, k + 6), Some(0xdc00..=0xdfff)) => k += 12,
                    Some(0xd800..=0xdfff) => {
                        k += 6;
                        return Some(k - 6);
                    }
                    Some(_) => k += 6,
                    // Any other escape is two bytes (`\"`, `\\`, `\n`); a bad one is serde's to name.
                    None => k += 2,
                },
                _ => k += 1,
            }
        }
        None
    })
}

/// The code unit of a `\uXXXX` escape starting at byte `k`, if one does.
fn unit_at(bytes: &[u8], k: usize) -> Option<u16> {
    let escape = bytes.get(k..k + 6)?;
    if escape[0] != b'\\' || escape[1] != b'u' || !escape[2..].iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    u16::from_str_radix(std::str::from_utf8(&escape[2..]).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_halves_are_found_and_pairs_left_alone() {
        let first = |raw: &str| lone_surrogates(raw).next();
        assert_eq!(first(r#"{"name": "a\ud800"}"#), Some(11));
        assert_eq!(first(r#"{"name": "\udc00x"}"#), Some(10));
        assert_eq!(first(r#"{"name": "\ud83d\ude00 \u00e9"}"#), None);
        // A high half followed by another high half: the first is lone.
        assert_eq!(first(r#"["\ud800\ud800\udc00"]"#), Some(2));
        // An escaped backslash is no escape; text outside strings is not looked at.
        assert_eq!(first(r#"["\\ud800"]"#), None);
        assert_eq!(
            without_lone_surrogates(r#"{"a": "\ud800", "b": "\ud83d\ude00"}"#).as_deref(),
            Some(r#"{"a": "\ufffd", "b": "\ud83d\ude00"}"#)
        );
        assert_eq!(without_lone_surrogates(r#"{"a": "x"}"#), None);
        // The escape serde_json stopped at, not the first of the text.
        let text = "{\"a\": 1,\n \"b\": \"\\udc01\", \"c\": \"\\ud800\"}";
        let e = serde_json::from_str::<serde_json::Value>(text).unwrap_err();
        assert_eq!(at_error(text, &e), Some(r"\udc01"), "{e}");
        let e = serde_json::from_str::<serde_json::Value>(r#"{"a": 1}x"#).unwrap_err();
        assert_eq!(at_error(r#"{"a": 1}x"#, &e), None);
        assert!(describe(r"\ud800").contains("high surrogate without the low one"));
        assert!(describe(r"\uDC00").contains("low surrogate without the high one"));
    }
}
