//! Where configuration values come from, and how the merged layers become
//! the typed `…Config` sections.
//!
//! Each layer (the TOML file, then `SVC_*` environment and flags, which
//! clap reads) gives some keys a value; a later layer replaces what an
//! earlier one gave, and a key no layer gives keeps the section's
//! `Default`. The merged values are then deserialized into each section
//! by its own serde derive, so a key's type, parsing and default are
//! declared once, on the section. This module knows nothing of any
//! particular key.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::forward_to_deserialize_any;

/// Where a key's value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The section's default.
    Default,
    /// The TOML file at this path.
    File(PathBuf),
    /// This environment variable.
    Env(String),
    /// This flag (`--bind`).
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(path) => write!(f, "file {}", path.display()),
            Source::Env(name) => write!(f, "env {name}"),
            Source::Flag(name) => write!(f, "flag {name}"),
        }
    }
}

/// A value as a layer gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum Raw {
    /// From the TOML file: already typed.
    Toml(toml::Value),
    /// From the environment or a flag: text, read as the key's type.
    Text(String),
    /// Several values of one flag (`--trusted-proxies a,b`).
    List(Vec<String>),
}

/// One key's value and where it came from. Its `Debug` leaves the value
/// out: it may be a secret (a token, a URL with a password).
#[derive(Clone, PartialEq)]
pub struct Given {
    pub key: String,
    pub value: Raw,
    pub source: Source,
}

impl fmt::Debug for Given {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Given")
            .field("key", &self.key)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// The layers merged: for each key, the value of the last layer that gave it.
#[derive(Debug, Clone, Default)]
pub struct Layers {
    values: BTreeMap<String, Given>,
}

impl Layers {
    /// Gives `given.key` its value, over what an earlier layer gave.
    pub fn set(&mut self, given: Given) {
        self.values.insert(given.key.clone(), given);
    }

    /// Where `key`'s value comes from.
    pub fn source(&self, key: &str) -> Source {
        self.values
            .get(key)
            .map_or(Source::Default, |g| g.source.clone())
    }

    /// Section `T` from the keys it declares; an error names the key and
    /// where its value came from.
    pub fn section<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let fields = fields_of::<T>();
        let entries = self
            .values
            .values()
            .filter(|g| fields.contains(&g.key.as_str()));
        T::deserialize(Entries::new("", entries.collect()))
    }
}

/// The keys section `T` declares (its serde field names, renames applied,
/// skipped fields left out), in declaration order.
pub fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldProbe(&mut fields));
    fields
}

/// A deserializer that only records the fields a struct asks for.
struct FieldProbe<'a>(&'a mut &'static [&'static str]);

impl<'de> de::Deserializer<'de> for FieldProbe<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(Error::new("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Error> {
        *self.0 = fields;
        Err(Error::new("probed"))
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map enum identifier ignored_any
    }
}

/// A configuration value that could not be read; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

impl Error {
    fn new(message: impl Into<String>) -> Self {
        Error(message.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Error(message.to_string())
    }
}

/// Given values as a map for a section's derive; each error is prefixed
/// with `{prefix}{key} ({source}): `.
pub(crate) struct Entries<'a> {
    prefix: &'a str,
    entries: std::vec::IntoIter<&'a Given>,
    current: Option<&'a Given>,
    /// Whether errors say the key (false when checking one flag's value,
    /// where clap already names it).
    labelled: bool,
}

impl<'a> Entries<'a> {
    pub(crate) fn new(prefix: &'a str, entries: Vec<&'a Given>) -> Self {
        Entries {
            prefix,
            entries: entries.into_iter(),
            current: None,
            labelled: true,
        }
    }

    pub(crate) fn unlabelled(mut self) -> Self {
        self.labelled = false;
        self
    }

    fn label(&self, given: &Given, error: impl fmt::Display) -> Error {
        if self.labelled {
            Error(format!(
                "{}{} ({}): {error}",
                self.prefix, given.key, given.source
            ))
        } else {
            Error(error.to_string())
        }
    }
}

impl<'de> de::Deserializer<'de> for Entries<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(given) = self.entries.next() else {
            return Ok(None);
        };
        self.current = Some(given);
        let key: de::value::StrDeserializer<'_, Error> = given.key.as_str().into_deserializer();
        seed.deserialize(key)
            .map(Some)
            .map_err(|e| self.label(given, e))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let given = self
            .current
            .take()
            .ok_or_else(|| Error::new("a value without its key"))?;
        seed.deserialize(Value(given.value.clone()))
            .map_err(|e| self.label(given, e))
    }
}

/// One value, read as whatever type the section's field asks for: TOML
/// values as they are, text parsed (`8`, `true`, `a,b` for a list).
struct Value(Raw);

impl<'de> IntoDeserializer<'de, Error> for Value {
    type Deserializer = Value;

    fn into_deserializer(self) -> Value {
        self
    }
}

impl Value {
    fn text(&self) -> Option<&str> {
        match &self.0 {
            Raw::Text(text) => Some(text.trim()),
            _ => None,
        }
    }

    fn parse<T: std::str::FromStr>(&self, what: &str) -> Result<Option<T>, Error> {
        match self.text() {
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|_| Error(format!("invalid value {text:?}: expected {what}"))),
            None => Ok(None),
        }
    }
}

macro_rules! parse_text {
    ($($method:ident => $ty:ty, $visit:ident, $what:literal;)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                match self.parse::<$ty>($what)? {
                    Some(value) => visitor.$visit(value),
                    None => self.deserialize_any(visitor),
                }
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for Value {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Raw::Toml(value) => value
                .deserialize_any(visitor)
                .map_err(|e| Error(e.message().trim().to_owned())),
            Raw::Text(text) => visitor.visit_string(text),
            Raw::List(items) => visitor.visit_seq(de::value::SeqDeserializer::new(
                items.into_iter().map(|item| Value(Raw::Text(item))),
            )),
        }
    }

    parse_text! {
        deserialize_bool => bool, visit_bool, "true or false";
        deserialize_i8 => i64, visit_i64, "a whole number";
        deserialize_i16 => i64, visit_i64, "a whole number";
        deserialize_i32 => i64, visit_i64, "a whole number";
        deserialize_i64 => i64, visit_i64, "a whole number";
        deserialize_u8 => u64, visit_u64, "a whole number, 0 or more";
        deserialize_u16 => u64, visit_u64, "a whole number, 0 or more";
        deserialize_u32 => u64, visit_u64, "a whole number, 0 or more";
        deserialize_u64 => u64, visit_u64, "a whole number, 0 or more";
        deserialize_f32 => f64, visit_f64, "a number";
        deserialize_f64 => f64, visit_f64, "a number";
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Raw::Text(text) => visitor.visit_seq(de::value::SeqDeserializer::new(
                text.split(',')
                    .map(|item| Value(Raw::Text(item.trim().to_owned())))
                    .collect::<Vec<_>>()
                    .into_iter(),
            )),
            other => Value(other).deserialize_any(visitor),
        }
    }

    forward_to_deserialize_any! {
        i128 u128 char str string bytes byte_buf unit unit_struct tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(default)]
    struct Section {
        number: u32,
        flag: bool,
        #[serde(rename = "renamed_list")]
        list: Vec<String>,
        name: Option<String>,
        #[serde(skip)]
        _skipped: u8,
    }

    fn given(key: &str, value: Raw, source: Source) -> Given {
        Given {
            key: key.into(),
            value,
            source,
        }
    }

    #[test]
    fn fields_are_the_serde_names() {
        assert_eq!(
            fields_of::<Section>(),
            ["number", "flag", "renamed_list", "name"]
        );
    }

    #[test]
    fn text_and_toml_read_alike_and_later_layers_win() {
        let file = Source::File("/etc/svc.toml".into());
        let mut layers = Layers::default();
        layers.set(given(
            "number",
            Raw::Toml(toml::Value::Integer(3)),
            file.clone(),
        ));
        layers.set(given("name", Raw::Toml("from-file".into()), file.clone()));
        layers.set(given(
            "flag",
            Raw::Text("true".into()),
            Source::Env("SVC_FLAG".into()),
        ));
        layers.set(given(
            "renamed_list",
            Raw::Text("a, b".into()),
            Source::Env("SVC_RENAMED_LIST".into()),
        ));
        layers.set(given(
            "name",
            Raw::Text("12".into()),
            Source::Flag("--name".into()),
        ));
        let section: Section = layers.section().unwrap();
        assert_eq!(
            section,
            Section {
                number: 3,
                flag: true,
                list: vec!["a".into(), "b".into()],
                name: Some("12".into()),
                _skipped: 0,
            }
        );
        assert_eq!(layers.source("number"), file);
        assert_eq!(layers.source("name"), Source::Flag("--name".into()));
        assert_eq!(layers.source("flag").to_string(), "env SVC_FLAG");
        assert_eq!(layers.source("unset"), Source::Default);
    }

    #[test]
    fn errors_name_the_key_and_its_source() {
        let mut layers = Layers::default();
        layers.set(given(
            "number",
            Raw::Text("many".into()),
            Source::Env("SVC_NUMBER".into()),
        ));
        let err = layers.section::<Section>().unwrap_err().to_string();
        assert!(
            err.starts_with("number (env SVC_NUMBER): invalid value \"many\""),
            "{err}"
        );
        let mut layers = Layers::default();
        layers.set(given(
            "flag",
            Raw::Toml(toml::Value::Integer(1)),
            Source::File("/x.toml".into()),
        ));
        let err = layers.section::<Section>().unwrap_err().to_string();
        assert!(
            err.starts_with("flag (file /x.toml): invalid type"),
            "{err}"
        );
    }
}
