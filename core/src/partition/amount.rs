//! Reading the amounts strategies are written with — bytes (`4096`, `64KiB`) and budget
//! fractions (`0.5`) — each bad value told what is wrong with it, not merely that it is bad.

use super::Budget;

/// The binary units bytes may carry, largest first (case matters: `kib` is not read as `KiB`).
const UNITS: [(&str, u64); 5] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1)];

/// How bytes are written, for messages.
pub(super) const BYTES_FORMS: &str = "4096, 64KiB, 2MiB, 1GiB, 1TiB";

/// A budget: a fraction when it is a decimal number (`0.5`, `1.0`), else bytes ([`bytes`]).
pub(super) fn budget(s: &str) -> Result<Budget, String> {
    let t = s.trim();
    let shown = crate::text::shorten(t, crate::text::CELL);
    let decimal = !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'));
    if !(decimal && t.contains('.')) {
        return bytes(s).map(Budget::Bytes);
    }
    let f: f64 = t.parse().map_err(|_| format!("`{shown}` is not a number (a fraction is written like 0.5)"))?;
    if !(0.0..=1.0).contains(&f) {
        return Err(format!("a fraction budget must be in [0, 1], got {f}"));
    }
    Ok(Budget::Fraction(f))
}

/// Bytes: decimal digits with an optional binary unit (`4096`, `64KiB`, `2MiB`, `1GiB`, `1TiB`).
/// The error says what is wrong with `s`: empty, negative, a fraction, hexadecimal, an unknown
/// unit, not a number, or more than 64 bits hold.
pub(super) fn bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let shown = crate::text::shorten(t, crate::text::CELL);
    if t.is_empty() {
        return Err(format!("no value: bytes are written {BYTES_FORMS}"));
    }
    let digits = t.trim_start_matches(['+', '-']);
    if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        let decimal = u64::from_str_radix(hex, 16).map_or_else(|_| String::new(), |v| format!(" ({v})"));
        return Err(format!("`{shown}` is hexadecimal; bytes are written in decimal{decimal}"));
    }
    let split = t.trim_end_matches(|c: char| c.is_ascii_alphabetic()).len();
    let (number, unit) = t.split_at(split);
    let number = number.trim_end();
    if !number.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E')) {
        return Err(format!("`{shown}` is not a number of bytes ({BYTES_FORMS})"));
    }
    let scale = unit_scale(t, number, unit)?;
    if number.starts_with('-') {
        return Err(format!("`{shown}` is negative; bytes are at least 0"));
    }
    if number.contains(['.', 'e', 'E']) && number.parse::<f64>().is_ok() {
        let why = match unit {
            "" => "a fraction or a decimal number".to_string(),
            _ => format!("a decimal number of {unit}: write a whole number of a smaller unit"),
        };
        return Err(format!("`{shown}` is {why}; bytes are a whole number ({BYTES_FORMS})"));
    }
    let whole = number.strip_prefix('+').unwrap_or(number);
    if whole.is_empty() || !whole.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("`{shown}` is not a number of bytes ({BYTES_FORMS})"));
    }
    let too_many = || format!("`{shown}` is more bytes than 64 bits hold (at most {} bytes)", u64::MAX);
    let n: u64 = whole.parse().map_err(|_| too_many())?;
    n.checked_mul(scale).ok_or_else(too_many)
}

/// The bytes one `unit` stands for (1 when there is none), or what is wrong with it.
fn unit_scale(t: &str, number: &str, unit: &str) -> Result<u64, String> {
    let shown = crate::text::shorten(t, crate::text::CELL);
    if unit.is_empty() {
        return Ok(1);
    }
    if let Some(&(_, scale)) = UNITS.iter().find(|(u, _)| *u == unit) {
        return if number.is_empty() { Err(format!("`{shown}` has no number before its unit")) } else { Ok(scale) };
    }
    if number.is_empty() {
        return Err(format!("`{shown}` is not a number of bytes ({BYTES_FORMS})"));
    }
    let units = "B, KiB, MiB, GiB and TiB (powers of 1024)";
    Err(match UNITS.iter().find(|(u, _)| u.eq_ignore_ascii_case(unit)) {
        Some((u, _)) => format!("`{shown}`: units are written {u}, with that case"),
        None if is_decimal_unit(unit) => format!("`{shown}`: {unit} is not a unit remat reads; it reads {units}"),
        None => format!("`{shown}`: unknown unit `{}`; units are {units}", crate::text::shorten(unit, 16)),
    })
}

/// `KB`, `MB`, `GB`, `k`, ...: units of 1000, or of 1024 written ambiguously.
fn is_decimal_unit(unit: &str) -> bool {
    let u = unit.to_ascii_uppercase();
    ["K", "M", "G", "T", "KB", "MB", "GB", "TB", "PIB", "PB"].contains(&u.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_their_faults() {
        assert_eq!(bytes("4096"), Ok(4096));
        assert_eq!(bytes("64KiB"), Ok(65536));
        assert_eq!(bytes("1TiB"), Ok(1 << 40));
        assert_eq!(bytes(" 2 MiB "), Ok(2 << 20));
        assert_eq!(bytes("18446744073709551615"), Ok(u64::MAX));
        let err = |s: &str| bytes(s).unwrap_err();
        assert!(err("").contains("no value"), "{}", err(""));
        assert!(err("abc").contains("`abc` is not a number of bytes"), "{}", err("abc"));
        assert!(err("-1").contains("is negative"), "{}", err("-1"));
        assert!(err("0.5").contains("a fraction or a decimal number"), "{}", err("0.5"));
        assert!(err("1.5GiB").contains("a decimal number of GiB"), "{}", err("1.5GiB"));
        assert!(err("0x10").contains("hexadecimal; bytes are written in decimal (16)"), "{}", err("0x10"));
        assert!(err("18446744073709551616").contains("more bytes than 64 bits hold"));
        assert!(err("16777216TiB").contains("more bytes than 64 bits hold"));
        assert!(err("1kib").contains("units are written KiB, with that case"), "{}", err("1kib"));
        assert!(err("1GB").contains("GB is not a unit remat reads"), "{}", err("1GB"));
        assert!(err("1parsecs").contains("unknown unit `parsecs`"), "{}", err("1parsecs"));
        assert!(err("GiB").contains("no number before its unit"), "{}", err("GiB"));
        assert!(err("1e3").contains("a fraction or a decimal number"), "{}", err("1e3"));
        assert!(err("a b").contains("`a b` is not a number of bytes"), "{}", err("a b"));
        assert!(err("1x2MiB").contains("`1x2MiB` is not a number of bytes"), "{}", err("1x2MiB"));
    }

    #[test]
    fn budgets_are_fractions_with_a_point() {
        assert_eq!(budget("0.5"), Ok(Budget::Fraction(0.5)));
        assert_eq!(budget("1"), Ok(Budget::Bytes(1)));
        assert_eq!(budget("64KiB"), Ok(Budget::Bytes(65536)));
        assert!(budget("1.5").unwrap_err().contains("a fraction budget must be in [0, 1], got 1.5"));
        assert!(budget("-0.5").unwrap_err().contains("must be in [0, 1]"));
        assert!(budget("0.5.5").unwrap_err().contains("`0.5.5` is not a number"));
        assert!(budget("-1").unwrap_err().contains("negative"));
        assert!(budget("abc").unwrap_err().contains("not a number of bytes"));
    }
}
