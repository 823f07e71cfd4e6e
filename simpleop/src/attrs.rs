//! String attributes as MXNet writes them, and their typed parsing.
//!
//! Graph JSON stores every op argument as a string (`"1.0"`, `"(0, 2)"`,
//! `"True"`, `"None"`). [`parse_kwargs`] turns such a map into an op's serde
//! kwargs struct in one pass: values are parsed by the type each field asks
//! for, unknown keys are rejected by name, and fields marked
//! `#[serde(default)]` take their defaults. [`to_attrs`] goes the other way.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde::forward_to_deserialize_any;

use crate::{Error, Result};

/// An op's arguments as strings, keyed by name (MXNet's `attrs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attrs(BTreeMap<String, String>);

impl Attrs {
    /// No attributes.
    pub fn new() -> Self {
        Attrs::default()
    }
    /// Adds or replaces one attribute.
    pub fn with(mut self, key: impl Into<String>, value: impl ToString) -> Self {
        self.0.insert(key.into(), value.to_string());
        self
    }
    /// Adds or replaces one attribute in place.
    pub fn insert(&mut self, key: impl Into<String>, value: impl ToString) {
        self.0.insert(key.into(), value.to_string());
    }
    /// One attribute's value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
    /// Removes one attribute, returning it.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        self.0.remove(key)
    }
    /// All attributes, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    /// Number of attributes.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// The attributes that are op arguments: MXNet's bookkeeping keys
    /// (`__shape__`, `__profiler_scope__`, ...) are skipped.
    pub fn arguments(&self) -> impl Iterator<Item = (&str, &str)> {
        self.iter().filter(|(k, _)| !k.starts_with("__"))
    }
}

impl<K: Into<String>, V: ToString, const N: usize> From<[(K, V); N]> for Attrs {
    fn from(pairs: [(K, V); N]) -> Self {
        let mut a = Attrs::new();
        for (k, v) in pairs {
            a.insert(k, v);
        }
        a
    }
}

impl<K: Into<String>, V: ToString> FromIterator<(K, V)> for Attrs {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut a = Attrs::new();
        for (k, v) in iter {
            a.insert(k, v);
        }
        a
    }
}

/// Parses a float the way MXNet writes one (`"1"`, `"1.0"`, `"-inf"`, `"nan"`).
pub fn parse_f64(s: &str) -> Option<f64> {
    let t = s.trim();
    match t.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        _ => t.parse().ok(),
    }
}

/// Parses `attrs` into the kwargs struct `P` of op `op`.
pub fn parse_kwargs<P: DeserializeOwned>(op: &str, attrs: &Attrs) -> Result<P> {
    P::deserialize(StructDe { attrs }).map_err(|e| e.into_error(op))
}

/// The field names a serde struct accepts, as its derive declares them.
pub fn kwarg_fields<P: DeserializeOwned>() -> &'static [&'static str] {
    struct Probe;
    impl<'de> de::Deserializer<'de> for Probe {
        type Error = FieldsFound;
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, FieldsFound> {
            Err(FieldsFound(fields))
        }
        fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, FieldsFound> {
            Err(FieldsFound(&[]))
        }
        forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map enum identifier ignored_any
        }
    }
    #[derive(Debug)]
    struct FieldsFound(&'static [&'static str]);
    impl fmt::Display for FieldsFound {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{:?}", self.0)
        }
    }
    impl std::error::Error for FieldsFound {}
    impl de::Error for FieldsFound {
        fn custom<T: fmt::Display>(_msg: T) -> Self {
            FieldsFound(&[])
        }
    }
    match P::deserialize(Probe) {
        Err(FieldsFound(fields)) => fields,
        Ok(_) => &[],
    }
}

/// Writes a kwargs struct as MXNet attribute strings.
pub fn to_attrs<P: serde::Serialize>(op: &str, params: &P) -> Result<Attrs> {
    let value = serde_json::to_value(params)
        .map_err(|e| Error::invalid(op, "kwargs", format!("cannot serialise: {e}")))?;
    let serde_json::Value::Object(map) = value else {
        return Err(Error::invalid(
            op,
            "kwargs",
            "kwargs must serialise as a struct",
        ));
    };
    Ok(map
        .into_iter()
        .map(|(k, v)| (k, mxnet_string(&v)))
        .collect())
}

fn mxnet_string(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(mxnet_string).collect();
            if parts.len() == 1 {
                format!("({},)", parts[0])
            } else {
                format!("({})", parts.join(", "))
            }
        }
        Value::Object(_) => v.to_string(),
    }
}

/// A parse failure, with the key it belongs to once known.
#[derive(Debug)]
struct KwargError {
    key: Option<String>,
    reason: String,
}

impl KwargError {
    fn at(mut self, key: &str) -> Self {
        self.key.get_or_insert_with(|| key.to_string());
        self
    }
    fn into_error(self, op: &str) -> Error {
        Error::BadKwarg {
            op: op.to_string(),
            arg: self.key.unwrap_or_else(|| "kwargs".into()),
            reason: self.reason,
        }
    }
}

impl fmt::Display for KwargError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}
impl std::error::Error for KwargError {}

impl de::Error for KwargError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        KwargError {
            key: None,
            reason: msg.to_string(),
        }
    }
    fn missing_field(field: &'static str) -> Self {
        KwargError {
            key: Some(field.to_string()),
            reason: "missing required argument".into(),
        }
    }
}

struct StructDe<'a> {
    attrs: &'a Attrs,
}

impl<'de> de::Deserializer<'de> for StructDe<'de> {
    type Error = KwargError;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, KwargError> {
        if let Some((key, _)) = self.attrs.arguments().find(|(k, _)| !fields.contains(k)) {
            return Err(KwargError {
                key: Some(key.to_string()),
                reason: format!("unknown argument; expected one of: {}", fields.join(", ")),
            });
        }
        self.deserialize_map(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
        visitor.visit_map(MapDe {
            iter: Box::new(self.attrs.arguments()),
            pending: None,
        })
    }

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
        self.deserialize_map(visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct enum identifier ignored_any
    }
}

struct MapDe<'a> {
    iter: Box<dyn Iterator<Item = (&'a str, &'a str)> + 'a>,
    pending: Option<(&'a str, &'a str)>,
}

impl<'de> de::MapAccess<'de> for MapDe<'de> {
    type Error = KwargError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, KwargError> {
        match self.iter.next() {
            Some((k, v)) => {
                self.pending = Some((k, v));
                let key: de::value::StrDeserializer<'de, KwargError> = k.into_deserializer();
                seed.deserialize(key).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, KwargError> {
        let (key, value) = self
            .pending
            .take()
            .ok_or_else(|| <KwargError as de::Error>::custom("value without key"))?;
        seed.deserialize(ValueDe(value)).map_err(|e| e.at(key))
    }
}

/// Deserialises one MXNet attribute string as whatever type is asked for.
struct ValueDe<'a>(&'a str);

impl<'a> ValueDe<'a> {
    fn fail(&self, expected: &str) -> KwargError {
        KwargError {
            key: None,
            reason: format!("expected {expected}, got `{}`", self.0),
        }
    }
    fn int(&self) -> Result<i64, KwargError> {
        let t = self.0.trim();
        if let Ok(v) = t.parse::<i64>() {
            return Ok(v);
        }
        // MXNet sometimes writes integral values as floats ("2.0").
        match parse_f64(t) {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
            _ => Err(self.fail("an integer")),
        }
    }
    fn items(&self) -> Vec<&'a str> {
        let t: &'a str = self.0.trim();
        let inner = t
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .or_else(|| t.strip_prefix('[').and_then(|s| s.strip_suffix(']')))
            .unwrap_or(t);
        inner
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect()
    }
}

macro_rules! de_int {
    ($($m:ident => $visit:ident as $t:ty),*) => {$(
        fn $m<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
            let v = self.int()?;
            let v = <$t>::try_from(v).map_err(|_| self.fail(concat!("a value that fits ", stringify!($t))))?;
            visitor.$visit(v)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for ValueDe<'de> {
    type Error = KwargError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
        let t = self.0.trim();
        if t == "None" {
            return visitor.visit_none();
        }
        if let Some(b) = parse_bool(t) {
            return visitor.visit_bool(b);
        }
        if let Ok(i) = t.parse::<i64>() {
            return visitor.visit_i64(i);
        }
        if let Some(f) = parse_f64(t) {
            return visitor.visit_f64(f);
        }
        if t.starts_with('(') || t.starts_with('[') {
            return self.deserialize_seq(visitor);
        }
        visitor.visit_borrowed_str(self.0)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
        match parse_bool(self.0.trim()) {
            Some(b) => visitor.visit_bool(b),
            None => Err(self.fail("a boolean (True or False)")),
        }
    }

    de_int!(
        deserialize_i8 => visit_i8 as i8, deserialize_i16 => visit_i16 as i16,
        deserialize_i32 => visit_i32 as i32, deserialize_i64 => visit_i64 as i64,
        deserialize_u8 => visit_u8 as u8, deserialize_u16 => visit_u16 as u16,
        deserialize_u32 => visit_u32 as u32, deserialize_u64 => visit_u64 as u64
    );

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
        match parse_f64(self.0) {
            Some(f) => visitor.visit_f64(f),
            None => Err(self.fail("a number")),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
        if self.0.trim() == "None" {
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
        let items = self.items();
        visitor.visit_seq(de::value::SeqDeserializer::new(
            items.into_iter().map(ValueDe),
        ))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, KwargError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, KwargError> {
        let s: de::value::StrDeserializer<'de, KwargError> = self.0.trim().into_deserializer();
        visitor.visit_enum(s)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, KwargError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, KwargError> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        i128 u128 char str string bytes byte_buf unit unit_struct tuple_struct
        map struct identifier
    }
}

impl<'de> IntoDeserializer<'de, KwargError> for ValueDe<'de> {
    type Deserializer = Self;
    fn into_deserializer(self) -> Self {
        self
    }
}

fn parse_bool(t: &str) -> Option<bool> {
    match t {
        "True" | "true" | "1" => Some(true),
        "False" | "false" | "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Deserialize, Serialize, PartialEq, Default)]
    #[serde(default)]
    struct P {
        axis: Option<Vec<i64>>,
        keepdims: bool,
        lo: f64,
        n: i32,
    }

    #[test]
    fn parses_mxnet_string_forms() {
        let p: P = parse_kwargs(
            "sum",
            &Attrs::from([
                ("axis", "(0, 2)"),
                ("keepdims", "True"),
                ("lo", "-1"),
                ("n", "-1"),
            ]),
        )
        .unwrap();
        assert_eq!(
            p,
            P {
                axis: Some(vec![0, 2]),
                keepdims: true,
                lo: -1.0,
                n: -1
            }
        );
        let p: P = parse_kwargs("sum", &Attrs::from([("axis", "None")])).unwrap();
        assert_eq!(p, P::default());
        let p: P = parse_kwargs("sum", &Attrs::from([("axis", "1")])).unwrap();
        assert_eq!(p.axis, Some(vec![1]));
    }

    #[test]
    fn errors_name_the_argument() {
        let e = parse_kwargs::<P>("sum", &Attrs::from([("axes", "1")])).unwrap_err();
        assert!(
            matches!(&e, Error::BadKwarg { arg, .. } if arg == "axes"),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("expected one of: axis, keepdims, lo, n"),
            "{e}"
        );
        let e = parse_kwargs::<P>("sum", &Attrs::from([("n", "x")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "op `sum`: argument `n`: expected an integer, got `x`"
        );
    }

    #[test]
    fn required_fields_are_reported_missing() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Clip {
            a_min: f64,
            a_max: f64,
        }
        let e = parse_kwargs::<Clip>("clip", &Attrs::from([("a_min", "0")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "op `clip`: argument `a_max`: missing required argument"
        );
    }

    #[test]
    fn writes_mxnet_strings() {
        let a = to_attrs(
            "sum",
            &P {
                axis: Some(vec![0, 2]),
                keepdims: true,
                lo: 1.5,
                n: 3,
            },
        )
        .unwrap();
        assert_eq!(a.get("axis"), Some("(0, 2)"));
        assert_eq!(a.get("keepdims"), Some("True"));
        assert_eq!(a.get("lo"), Some("1.5"));
        let back: P = parse_kwargs("sum", &a).unwrap();
        assert_eq!(back.axis, Some(vec![0, 2]));
    }
}
