//! Serde helpers for the `…Config` sections: how durations, seconds and
//! other typed values are written in the TOML file, the `SVC_*`
//! environment and the flags, and how `svc serve --print-config` writes
//! them back. Each is used as `#[serde(with = "svc_core::config::…")]`;
//! nothing here knows where a value came from.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::duration::{DurationError, parse_seconds};

/// `500ms`, or whatever [`parse_seconds`] reads (`5s`, `2m`, `12h`, `30d`,
/// `2w`); always positive.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    if let Some(ms) = text.trim().strip_suffix("ms") {
        return match ms.parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(DurationError(text.to_owned())),
        };
    }
    let seconds = parse_seconds(text)?;
    u64::try_from(seconds)
        .map(Duration::from_secs)
        .map_err(|_| DurationError(text.to_owned()))
}

/// The shortest text [`parse_duration`] reads back as `duration`: the
/// largest unit that divides it (`10m`, `30d`, `500ms`).
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    if !millis.is_multiple_of(1000) {
        return format!("{millis}ms");
    }
    let seconds = duration.as_secs();
    for (unit, size) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)] {
        if seconds > 0 && seconds.is_multiple_of(size) {
            return format!("{}{unit}", seconds / size);
        }
    }
    format!("{seconds}s")
}

/// A size in bytes: a whole number, or one with a unit (`512KiB`, `4MiB`,
/// `1GiB`; `kB`, `MB`, `GB` are powers of 1000); at least 1.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let bad = || format!("invalid size {text:?}: use a number of bytes, or e.g. 512KiB or 4MiB");
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let count: u64 = digits.parse().map_err(|_| bad())?;
    let unit: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(bad()),
    };
    match count.checked_mul(unit) {
        Some(0) => Err(format!("invalid size {text:?}: must be at least 1 byte")),
        Some(bytes) => Ok(bytes),
        None => Err(bad()),
    }
}

/// A byte count (`usize`) written as a number or with a unit (`4MiB`); it
/// is written back as a number.
pub mod byte_count {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        struct Bytes;
        impl Visitor<'_> for Bytes {
            type Value = u64;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of bytes, or one with a unit such as 4MiB")
            }
            fn visit_u64<E: de::Error>(self, bytes: u64) -> Result<u64, E> {
                parse_bytes(&bytes.to_string()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, bytes: i64) -> Result<u64, E> {
                parse_bytes(&bytes.to_string()).map_err(E::custom)
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<u64, E> {
                parse_bytes(text).map_err(E::custom)
            }
        }
        let bytes = d.deserialize_any(Bytes)?;
        usize::try_from(bytes).map_err(de::Error::custom)
    }

    pub fn serialize<S: Serializer>(value: &usize, s: S) -> Result<S::Ok, S::Error> {
        value.serialize(s)
    }
}

/// A [`Duration`] written as `500ms`, `30s`, `10m`, ...
pub mod duration {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map_err(de::Error::custom)
    }

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*value))
    }
}

/// A [`duration`], or `off` (also `0`) for none: [`Duration::ZERO`].
pub mod duration_or_off {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        if matches!(text.trim(), "off" | "0") {
            return Ok(Duration::ZERO);
        }
        parse_duration(&text).map_err(|e| de::Error::custom(format!("{e}, or off")))
    }

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if value.is_zero() {
            return s.serialize_str("off");
        }
        s.serialize_str(&format_duration(*value))
    }
}

/// Whole seconds (`i64`, as the domain stores them) written as a duration:
/// `600s`, `10m`, `30d`.
pub mod seconds {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text = String::deserialize(d)?;
        parse_seconds(&text).map_err(de::Error::custom)
    }

    pub fn serialize<S: Serializer>(value: &i64, s: S) -> Result<S::Ok, S::Error> {
        let seconds = u64::try_from(*value).map_err(serde::ser::Error::custom)?;
        s.serialize_str(&format_duration(Duration::from_secs(seconds)))
    }
}

/// A number that must not be zero (`max_connections`, `parallel`, ...).
pub mod at_least_one {
    use super::*;

    pub fn deserialize<'de, D, T>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de> + Default + PartialEq,
    {
        let value = T::deserialize(d)?;
        if value == T::default() {
            return Err(de::Error::custom("must be at least 1"));
        }
        Ok(value)
    }

    pub fn serialize<S: Serializer, T: Serialize>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        value.serialize(s)
    }
}

/// A value written as its text (`FromStr` in, `Display` out): addresses,
/// URLs, CIDR blocks.
pub mod text {
    use super::*;

    pub fn deserialize<'de, D, T>(d: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: FromStr,
        T::Err: fmt::Display,
    {
        let text = String::deserialize(d)?;
        text.trim().parse().map_err(de::Error::custom)
    }

    pub fn serialize<S: Serializer, T: fmt::Display>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }
}

/// As [`text`], for an optional value (absent is `None`).
pub mod optional_text {
    use super::*;

    pub fn deserialize<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: FromStr,
        T::Err: fmt::Display,
    {
        super::text::deserialize(d).map(Some)
    }

    pub fn serialize<S: Serializer, T: fmt::Display>(
        value: &Option<T>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => s.collect_str(value),
            None => s.serialize_none(),
        }
    }
}

/// A list of values written as text: a TOML array, or one string of
/// comma-separated items (as the environment and flags give it); empty
/// items are skipped.
pub mod text_list {
    use super::*;

    pub fn deserialize<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
    where
        D: Deserializer<'de>,
        T: FromStr,
        T::Err: fmt::Display,
    {
        struct Items<T>(std::marker::PhantomData<T>);
        impl<'de, T: FromStr> Visitor<'de> for Items<T>
        where
            T::Err: fmt::Display,
        {
            type Value = Vec<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list, or comma-separated items")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Vec<T>, E> {
                parse_items(text.split(','))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    items.push(item);
                }
                parse_items(items.iter().map(String::as_str))
            }
        }
        d.deserialize_any(Items(std::marker::PhantomData))
    }

    fn parse_items<'a, T: FromStr, E: de::Error>(
        items: impl Iterator<Item = &'a str>,
    ) -> Result<Vec<T>, E>
    where
        T::Err: fmt::Display,
    {
        items
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| item.parse().map_err(de::Error::custom))
            .collect()
    }

    pub fn serialize<S: Serializer, T: fmt::Display>(value: &[T], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(value.iter().map(ToString::to_string))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_back_what_they_print() {
        for (text, duration) in [
            ("500ms", Duration::from_millis(500)),
            ("45s", Duration::from_secs(45)),
            ("10m", Duration::from_secs(600)),
            ("30d", Duration::from_secs(2_592_000)),
            ("2w", Duration::from_secs(1_209_600)),
        ] {
            assert_eq!(parse_duration(text), Ok(duration));
            assert_eq!(format_duration(duration), text);
        }
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert!(parse_duration("0ms").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn sizes_take_a_unit() {
        assert_eq!(parse_bytes("4194304"), Ok(4_194_304));
        assert_eq!(parse_bytes("4MiB"), Ok(4_194_304));
        assert_eq!(parse_bytes("512 KiB"), Ok(524_288));
        assert_eq!(parse_bytes("2MB"), Ok(2_000_000));
        for bad in ["", "0", "0MiB", "-1", "4 MiBs", "1.5MiB", "99999999999GiB"] {
            assert!(parse_bytes(bad).is_err(), "{bad:?}");
        }
    }
}
