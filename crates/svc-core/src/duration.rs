//! Human durations such as `30d`, `12h`, `90m`, `45s` or `2w`, as used by
//! `--expires-in`.

use thiserror::Error;

/// A duration that could not be read; the message says the accepted forms.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("invalid duration {0:?}: use a number followed by s, m, h, d or w (e.g. 30d)")]
pub struct DurationError(pub String);

/// Parses `<number><unit>` into seconds; the number must be positive.
pub fn parse_seconds(text: &str) -> Result<i64, DurationError> {
    let err = || DurationError(text.to_owned());
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
    let (digits, unit) = text.split_at(split);
    let count: i64 = digits.parse().map_err(|_| err())?;
    let unit_seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(err()),
    };
    if count <= 0 {
        return Err(err());
    }
    count.checked_mul(unit_seconds).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_unit() {
        assert_eq!(parse_seconds("45s"), Ok(45));
        assert_eq!(parse_seconds("90m"), Ok(5_400));
        assert_eq!(parse_seconds("12h"), Ok(43_200));
        assert_eq!(parse_seconds("30d"), Ok(2_592_000));
        assert_eq!(parse_seconds("2w"), Ok(1_209_600));
    }

    #[test]
    fn refuses_nonsense() {
        for bad in [
            "",
            "d",
            "30",
            "30x",
            "-1d",
            "0d",
            "1.5h",
            "99999999999999999999d",
        ] {
            assert!(parse_seconds(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
