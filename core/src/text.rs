//! Echoing user strings safely: every message remat prints stays one line of reasonable length,
//! whatever names, ops or ids a document holds.

/// The longest a table cell, a name in a message or a DOT label line gets before it is shortened.
pub const CELL: usize = 48;

/// `s` with control characters escaped (`\n`, `\u{7}`) and, past `max` characters, cut in the
/// middle with `…` (head and tail kept, so ids that differ at the end stay distinguishable).
pub fn shorten(s: &str, max: usize) -> String {
    // Only what can be kept is escaped: a 10 MB string costs no more than a short one.
    let chars = s.chars().count();
    if chars > 4 * max + 16 {
        let keep = max.saturating_sub(1);
        let head: String = s.chars().take(keep).collect();
        let tail: String = s.chars().skip(chars - keep).collect();
        return shorten(&format!("{head}…{tail}"), max);
    }
    let mut escaped = String::with_capacity(s.len());
    for c in s.chars() {
        push_escaped(&mut escaped, c);
    }
    let n = escaped.chars().count();
    if n <= max {
        return escaped;
    }
    let keep = max.saturating_sub(1);
    let head: String = escaped.chars().take(keep - keep / 3).collect();
    let tail: String = escaped.chars().skip(n - keep / 3).collect();
    format!("{head}…{tail}")
}

/// The longest a whole error message gets (control characters escaped first): a backstop, so
/// that a message that echoes something no site shortened is still one reasonable line.
pub const LINE: usize = 600;

/// `s` as one line of at most 600 characters: control characters escaped, cut in the middle
/// past the limit. Idempotent, so messages may pass through it more than once.
pub fn one_line(s: &str) -> String {
    shorten(s, LINE)
}

/// `"s"`, shortened and with quotes, backslashes and control characters escaped.
pub fn quoted(s: &str) -> String {
    let mut inner = String::with_capacity(s.len());
    for c in s.chars() {
        if c == '"' || c == '\\' {
            inner.push('\\');
        }
        inner.push(c);
    }
    format!("\"{}\"", shorten(&inner, CELL))
}

/// Appends `c`, a character that breaks a line as its escape (`\n`, `\u{1b}`, `\u{2028}`):
/// control characters (U+0085 among them), and the line and paragraph separators, which are
/// no control characters but end a line for readers that split lines as Python's
/// `str.splitlines` does.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if breaks_line(c) => {
            let _ = std::fmt::Write::write_fmt(out, format_args!("\\u{{{:x}}}", c as u32));
        }
        c => out.push(c),
    }
}

/// Whether `c` is echoed escaped: a control character (U+0085 included) or U+2028/U+2029.
/// (A lone surrogate cannot reach a Rust string: the JSON readers refuse its escape.)
pub fn breaks_line(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// A short list for a message: the distinct `names` in order of first appearance, each in
/// backticks, at most `max` of them and then how many more (`` `a`, `b`, `c` and 12 more ``).
pub fn short_list<'a>(names: impl IntoIterator<Item = &'a str>, max: usize) -> String {
    let mut seen = std::collections::HashSet::new();
    let distinct: Vec<&str> = names.into_iter().filter(|n| seen.insert(*n)).collect();
    let shown: Vec<String> = distinct.iter().take(max).map(|n| format!("`{}`", shorten(n, 60))).collect();
    match distinct.len().saturating_sub(max) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// `512 B`, `1.5 KiB`, `3.0 MiB`, `2.0 GiB`.
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_strings_cut() {
        assert_eq!(shorten("a\nb\u{0}c", 48), "a\\nb\\u{0}c");
        let long = "x".repeat(1000) + "END";
        let s = shorten(&long, 48);
        assert_eq!(s.chars().count(), 48);
        assert!(s.ends_with("END") && s.contains('…'));
        assert_eq!(quoted("say \"hi\""), "\"say \\\"hi\\\"\"");
        assert_eq!(shorten("a\u{85}b\u{2028}c\u{2029}d", 48), "a\\u{85}b\\u{2028}c\\u{2029}d");
    }
}
