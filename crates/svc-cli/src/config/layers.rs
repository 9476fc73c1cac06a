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
//!
//! A section's [`Shape`] is read from its derive: a field whose type is a
//! struct is a nested section whose keys sit beside its parent's (the file
//! says `device_interval`, not `[device] interval`), so `ServerConfig`
//! holds its `device` section and the keys fill both; an `Option` of one
//! is there only when one of its keys is given, and then a key it needs
//! that none gave is an error naming both; a map field is a table of
//! tables (`[prices.<id>]`), whose errors say where inside it they are.

use std::cell::Cell;
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

    /// Section `T` from the keys it declares, its nested sections'
    /// included; an error names the key and where its value came from.
    pub fn section<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let shape = Shape::of::<T>();
        let given = self
            .values
            .values()
            .filter(|g| shape.contains(&g.key))
            .collect();
        T::deserialize(Entries::new("", &shape, given, true)?)
    }
}

/// Reads `T`, whose shape is `shape`, from `given` alone: errors are prefixed with `prefix` (such
/// as `models.qwen.`) when `labelled`, and a key `T` does not declare is
/// an error that names it.
pub(crate) fn read<T: DeserializeOwned>(
    shape: &Shape,
    prefix: &str,
    given: Vec<&Given>,
    labelled: bool,
) -> Result<T, Error> {
    T::deserialize(Entries::new(prefix, shape, given, labelled)?)
}

/// The keys a section declares, as its serde derive says: each field is a
/// key, a table of tables (`[prices.<id>]`, a map) or a section nested in
/// this one (a struct, or an optional one), whose keys are given beside
/// this section's, never under the field's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The type's name (`ServerConfig`).
    pub name: &'static str,
    /// Its serde fields (renames applied, skipped fields left out), in
    /// declaration order.
    pub fields: Vec<(&'static str, Field)>,
}

/// What one field of a [`Shape`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// A key: given by the file, an environment variable or a flag.
    Key,
    /// A table of tables such as `[prices.<id>]`: only the file gives one.
    Table,
    /// A nested section. An optional one (`Option<…>`) is present exactly
    /// when one of its keys is given; a key it needs that is missing then
    /// is an error naming both.
    Section { shape: Shape, optional: bool },
}

impl Shape {
    /// The shape of `T`, found by asking its `Deserialize` (nothing is
    /// read); empty when `T` is not a struct.
    pub fn of<T: DeserializeOwned>() -> Shape {
        match probe::<T>(&[]) {
            Some(Seen::Struct { name, fields, .. }) => shape_at::<T>(&mut Vec::new(), name, fields),
            _ => Shape {
                name: "",
                fields: Vec::new(),
            },
        }
    }

    /// Every key and table, nested sections' included, in declaration
    /// order; tables are marked `true`.
    pub fn keys(&self) -> Vec<(&'static str, bool)> {
        let mut keys = Vec::new();
        for (name, field) in &self.fields {
            match field {
                Field::Key => keys.push((*name, false)),
                Field::Table => keys.push((*name, true)),
                Field::Section { shape, .. } => keys.extend(shape.keys()),
            }
        }
        keys
    }

    /// `table`, this section's serialized form, as its keys (nested
    /// sections' included, each beside the others) and its tables of
    /// tables, in declaration order.
    pub fn flatten(
        &self,
        mut table: toml::Table,
    ) -> (toml::Table, Vec<(&'static str, toml::Table)>) {
        let mut keys = toml::Table::new();
        let mut tables = Vec::new();
        for (name, field) in &self.fields {
            let Some(value) = table.remove(*name) else {
                continue;
            };
            match (field, value) {
                (Field::Table, toml::Value::Table(value)) => tables.push((*name, value)),
                (Field::Section { shape, .. }, toml::Value::Table(value)) => {
                    let (more_keys, more_tables) = shape.flatten(value);
                    keys.extend(more_keys);
                    tables.extend(more_tables);
                }
                (_, value) => {
                    keys.insert((*name).to_owned(), value);
                }
            }
        }
        (keys, tables)
    }

    /// Whether `key` is a key or table of this section or a nested one.
    pub fn contains(&self, key: &str) -> bool {
        self.place(key).is_some()
    }

    /// Where `key` goes: `Some(None)` a field of this section, `Some(Some(i))`
    /// the nested section of field `i`, `None` nowhere.
    fn place(&self, key: &str) -> Option<Option<usize>> {
        self.fields
            .iter()
            .enumerate()
            .find_map(|(i, (name, field))| match field {
                Field::Section { shape, .. } => shape.contains(key).then_some(Some(i)),
                Field::Key | Field::Table => (*name == key).then_some(None),
            })
    }
}

/// What the field at a path asked of its deserializer.
#[derive(Debug, Clone, Copy)]
enum Seen {
    Struct {
        name: &'static str,
        fields: &'static [&'static str],
        optional: bool,
    },
    Map,
    Other,
}

fn shape_at<T: DeserializeOwned>(
    path: &mut Vec<usize>,
    name: &'static str,
    fields: &'static [&'static str],
) -> Shape {
    let mut shape = Shape {
        name,
        fields: Vec::with_capacity(fields.len()),
    };
    for (i, field) in fields.iter().enumerate() {
        path.push(i);
        let kind = match probe::<T>(path) {
            Some(Seen::Struct {
                name,
                fields,
                optional,
            }) => Field::Section {
                shape: shape_at::<T>(path, name, fields),
                optional,
            },
            Some(Seen::Map) => Field::Table,
            Some(Seen::Other) | None => Field::Key,
        };
        path.pop();
        shape.fields.push((field, kind));
    }
    shape
}

/// What the field at `path` (field indices, from `T` down) asks of its
/// deserializer: `T` is fed only that field, whose value records what it
/// is asked for and fails.
fn probe<T: DeserializeOwned>(path: &[usize]) -> Option<Seen> {
    let seen = Cell::new(None);
    let _ = T::deserialize(Probe {
        path,
        seen: &seen,
        optional: false,
    });
    seen.get()
}

struct Probe<'a> {
    path: &'a [usize],
    seen: &'a Cell<Option<Seen>>,
    optional: bool,
}

impl Probe<'_> {
    fn record(self, seen: Seen) -> Error {
        if self.path.is_empty() {
            self.seen.set(Some(seen));
        }
        Error::new("probed")
    }
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(self.record(Seen::Other))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        let Some((&i, rest)) = self.path.split_first() else {
            let optional = self.optional;
            return Err(self.record(Seen::Struct {
                name,
                fields,
                optional,
            }));
        };
        let key = fields.get(i).ok_or_else(|| Error::new("probed"))?;
        visitor.visit_map(OneEntry {
            key: Some(key),
            value: Some(Probe {
                path: rest,
                seen: self.seen,
                optional: false,
            }),
        })
    }

    fn deserialize_map<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
        Err(self.record(Seen::Map))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(Probe {
            optional: true,
            ..self
        })
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct enum identifier
        ignored_any
    }
}

/// A map of one field, whose value is a [`Probe`].
struct OneEntry<'a> {
    key: Option<&'static str>,
    value: Option<Probe<'a>>,
}

impl<'de> MapAccess<'de> for OneEntry<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.key.take() {
            Some(key) => seed.deserialize(key.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let value = self.value.take().ok_or_else(|| Error::new("probed"))?;
        seed.deserialize(value)
    }
}

/// A configuration value that could not be read; the message names the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
    kind: ErrorKind,
    /// Where in a TOML value (`qwen.input`, `[0].model`) the error is.
    at: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ErrorKind {
    /// A given key or value is wrong.
    Given,
    /// A section's derive wants a key that none gave.
    Missing(&'static str),
    /// A given key needs another that none gave; the message names both.
    Needs,
    /// Anything else.
    Other,
}

impl Error {
    fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
            kind: ErrorKind::Other,
            at: String::new(),
        }
    }

    /// Whether the error is about a given key or its value (not about a
    /// key that none gave).
    pub fn is_about_a_given_value(&self) -> bool {
        self.kind == ErrorKind::Given
    }

    /// Whether the message names the key it is about (with its prefix).
    pub fn names_its_key(&self) -> bool {
        matches!(self.kind, ErrorKind::Given | ErrorKind::Needs)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(message: T) -> Self {
        Error::new(message.to_string())
    }

    fn missing_field(field: &'static str) -> Self {
        Error {
            message: format!("missing field `{field}`"),
            kind: ErrorKind::Missing(field),
            at: String::new(),
        }
    }
}

/// Given values as a map for a section's derive, each key where its
/// section's [`Shape`] puts it; each error is prefixed with
/// `{prefix}{key} ({source}): `.
pub(crate) struct Entries<'a> {
    prefix: &'a str,
    items: std::vec::IntoIter<Item<'a>>,
    current: Option<Item<'a>>,
    /// Whether errors say the key (false when checking one flag's value,
    /// where clap already names it).
    labelled: bool,
}

enum Item<'a> {
    /// A key of this section.
    Key(&'a Given),
    /// A nested section, with the given keys that are its.
    Section {
        name: &'static str,
        shape: &'a Shape,
        given: Vec<&'a Given>,
    },
}

impl<'a> Entries<'a> {
    /// `given` placed by `shape`; a key it does not declare is an error.
    pub(crate) fn new(
        prefix: &'a str,
        shape: &'a Shape,
        given: Vec<&'a Given>,
        labelled: bool,
    ) -> Result<Self, Error> {
        let mut items = Vec::new();
        let mut nested: Vec<Vec<&Given>> = vec![Vec::new(); shape.fields.len()];
        for given in given {
            match shape.place(&given.key) {
                Some(None) => items.push(Item::Key(given)),
                Some(Some(i)) => nested[i].push(given),
                None => {
                    let known: Vec<String> = shape
                        .keys()
                        .iter()
                        .map(|(key, _)| format!("`{key}`"))
                        .collect();
                    let error = Error::new(format!(
                        "unknown key `{}`, expected one of {}",
                        given.key,
                        known.join(", ")
                    ));
                    return Err(label(prefix, labelled, given, error));
                }
            }
        }
        for ((name, field), given) in shape.fields.iter().zip(nested) {
            if let Field::Section { shape, optional } = field
                && (!given.is_empty() || !optional)
            {
                items.push(Item::Section { name, shape, given });
            }
        }
        Ok(Entries {
            prefix,
            items: items.into_iter(),
            current: None,
            labelled,
        })
    }
}

/// `error`, about `given`, prefixed with its key, where in its value and
/// its source.
fn label(prefix: &str, labelled: bool, given: &Given, error: Error) -> Error {
    if error.kind != ErrorKind::Other {
        return error;
    }
    let at = match error.at.as_str() {
        "" => String::new(),
        at if at.starts_with('[') => at.to_owned(),
        at => format!(".{at}"),
    };
    let message = if labelled {
        format!(
            "{prefix}{}{at} ({}): {}",
            given.key, given.source, error.message
        )
    } else if at.is_empty() {
        error.message
    } else {
        format!("{}: {}", at.trim_start_matches('.'), error.message)
    };
    Error {
        message,
        kind: ErrorKind::Given,
        at: String::new(),
    }
}

impl<'de> de::Deserializer<'de> for Entries<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(self)
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

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some(item) = self.items.next() else {
            return Ok(None);
        };
        let key = match &item {
            Item::Key(given) => {
                let key: de::value::StrDeserializer<'_, Error> =
                    given.key.as_str().into_deserializer();
                seed.deserialize(key)
                    .map_err(|e| label(self.prefix, self.labelled, given, e))?
            }
            Item::Section { name, .. } => seed.deserialize(name.into_deserializer())?,
        };
        self.current = Some(item);
        Ok(Some(key))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        match self.current.take() {
            None => Err(Error::new("a value without its key")),
            Some(Item::Key(given)) => seed
                .deserialize(Value(given.value.clone()))
                .map_err(|e| label(self.prefix, self.labelled, given, e)),
            Some(Item::Section { shape, given, .. }) => {
                let first = given.first().copied();
                let entries = Entries::new(self.prefix, shape, given, self.labelled)?;
                seed.deserialize(entries)
                    .map_err(|e| match (e.kind, first) {
                        // A key of this section is given, and another it needs is not.
                        (ErrorKind::Missing(missing), Some(given)) => {
                            let prefix = self.prefix;
                            let message = if self.labelled {
                                format!(
                                    "{prefix}{} ({}) goes with {prefix}{missing}, which is not set",
                                    given.key, given.source
                                )
                            } else {
                                format!("goes with {missing}, which is not set")
                            };
                            Error {
                                message,
                                kind: ErrorKind::Needs,
                                at: String::new(),
                            }
                        }
                        _ => e,
                    })
            }
        }
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
                .map_err(|_| Error::new(format!("invalid value {text:?}: expected {what}"))),
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
            Raw::Toml(value) => {
                // Tracked, so that an error inside a table names where.
                let mut track = serde_path_to_error::Track::new();
                serde_path_to_error::Deserializer::new(value, &mut track)
                    .deserialize_any(visitor)
                    .map_err(|e| {
                        let path = track.path();
                        Error {
                            message: e.message().trim().to_owned(),
                            kind: ErrorKind::Other,
                            at: if path.iter().next().is_some() {
                                path.to_string()
                            } else {
                                String::new()
                            },
                        }
                    })
            }
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

    /// A section with a nested one, an optional one that needs a key, and
    /// a table of tables.
    #[derive(Debug, Default, PartialEq, serde::Deserialize)]
    #[serde(default)]
    struct Outer {
        top: u32,
        inner: Section,
        pair: Option<Pair>,
        tables: BTreeMap<String, Pair>,
    }

    #[derive(Debug, PartialEq, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Pair {
        left: u32,
        #[serde(default)]
        right: u32,
    }

    #[test]
    fn fields_are_the_serde_names() {
        let keys: Vec<_> = Shape::of::<Section>()
            .keys()
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        assert_eq!(keys, ["number", "flag", "renamed_list", "name"]);
        let shape = Shape::of::<Outer>();
        assert_eq!(shape.name, "Outer");
        assert_eq!(
            shape.keys(),
            [
                ("top", false),
                ("number", false),
                ("flag", false),
                ("renamed_list", false),
                ("name", false),
                ("left", false),
                ("right", false),
                ("tables", true)
            ]
        );
        assert!(matches!(
            &shape.fields[2].1,
            Field::Section { shape, optional: true } if shape.name == "Pair"
        ));
    }

    #[test]
    fn nested_sections_are_read_from_the_same_keys() {
        let file = Source::File("/x.toml".into());
        let mut layers = Layers::default();
        layers.set(given(
            "top",
            Raw::Text("1".into()),
            Source::Env("SVC_TOP".into()),
        ));
        layers.set(given(
            "number",
            Raw::Toml(toml::Value::Integer(2)),
            file.clone(),
        ));
        let outer: Outer = layers.section().unwrap();
        assert_eq!((outer.top, outer.inner.number, outer.pair), (1, 2, None));
        // An optional section is there once one of its keys is given, and
        // a key it needs that is missing is named with the one given.
        layers.set(given(
            "right",
            Raw::Text("3".into()),
            Source::Flag("--right".into()),
        ));
        let err = layers.section::<Outer>().unwrap_err().to_string();
        assert_eq!(err, "right (flag --right) goes with left, which is not set");
        assert!(!err.contains("missing field"), "{err}");
        layers.set(given(
            "left",
            Raw::Toml(toml::Value::Integer(4)),
            file.clone(),
        ));
        let outer: Outer = layers.section().unwrap();
        assert_eq!(outer.pair, Some(Pair { left: 4, right: 3 }));
        // An error inside a table says where.
        let tables: toml::Value = toml::from_str("a = { left = 1, rihgt = 2 }").unwrap();
        layers.set(given("tables", Raw::Toml(tables), file.clone()));
        let err = layers.section::<Outer>().unwrap_err().to_string();
        assert!(
            err.starts_with("tables.a.rihgt (file /x.toml): unknown field `rihgt`"),
            "{err}"
        );
        // A nested section's name is no key, and neither is anything else.
        for key in ["inner", "pair", "bogus"] {
            let one = given(key, Raw::Text("1".into()), file.clone());
            let err = read::<Outer>(&Shape::of::<Outer>(), "t.", vec![&one], true)
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(&format!("t.{key} (file /x.toml): unknown key")),
                "{err}"
            );
        }
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
