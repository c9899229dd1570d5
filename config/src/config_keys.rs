//! Tests: every key zones.toml accepts is documented in wardcell-zones.toml(5), and the
//! page documents no key the file does not accept.
//!
//! The keys come from the serde types themselves, not from a list kept by hand: a probe
//! deserializer walks [`RawFile`] and every type under it, answering each field with a
//! placeholder, and records the dotted path of every key that holds a value (a map of
//! tables contributes `NAME`: `zones.NAME.profile`). A field added to any `Raw*` struct
//! is a key here at once, and fails the test until the page has it.
//!
//! The page is read by its structure: each `.SS "[TABLE]"` heading opens a table
//! (`[zones.NAME]`, `[audit]`), and each `.TP` item under it whose tag starts with a bold
//! key (`\fBenv.deny\fR = ...`) documents `TABLE.KEY`.

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde::de::value::{BorrowedStrDeserializer, Error as DeError, UsizeDeserializer};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::RawFile;

/// toml's `Spanned<T>` deserializes as a struct of this name (serde_spanned).
const SPANNED: &str = "$__serde_spanned_private_Spanned";

/// Every key `RawFile` accepts, as dotted paths.
fn accepted() -> BTreeSet<String> {
    let keys = RefCell::new(BTreeSet::new());
    let probe = Probe {
        path: "",
        leaf: None,
        key: false,
        keys: &keys,
    };
    if let Err(e) = RawFile::deserialize(probe) {
        panic!("the key probe cannot walk the configuration's types ({e}): extend config_keys.rs");
    }
    keys.into_inner()
}

#[derive(Clone, Copy)]
struct Probe<'a> {
    path: &'a str,
    /// Inside a map whose values are not tables: the map's own path is the key.
    leaf: Option<&'a str>,
    /// A map's key: its text is `NAME`, and it is no key of the file.
    key: bool,
    keys: &'a RefCell<BTreeSet<String>>,
}

// A `path: String` does not fit a Copy probe: the paths live in a leaked arena for the
// test's short life.
fn keep(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl<'a> Probe<'a> {
    fn record(&self) {
        if !self.key {
            let path = self.leaf.unwrap_or(self.path);
            self.keys.borrow_mut().insert(path.to_string());
        }
    }

    fn child(&self, name: &str) -> Probe<'a> {
        let path = if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        };
        Probe {
            path: keep(path),
            leaf: None,
            key: false,
            keys: self.keys,
        }
    }
}

macro_rules! scalar {
    ($($method:ident => $visit:ident($value:expr)),* $(,)?) => {
        $(fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
            self.record();
            v.$visit($value)
        })*
    };
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = DeError;

    /// A value of more than one type (an untagged enum such as `processes = 512` or
    /// `"none"`, `extends = "p"` or a list) is a key with a scalar value: recorded, and
    /// offered as a string, which each of them takes. A type read this way that held a
    /// table would have its keys missed, so none may.
    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.record();
        v.visit_borrowed_str("x")
    }

    scalar! {
        deserialize_bool => visit_bool(false),
        deserialize_i8 => visit_i8(0),
        deserialize_i16 => visit_i16(0),
        deserialize_i32 => visit_i32(0),
        deserialize_i64 => visit_i64(0),
        deserialize_u8 => visit_u8(0),
        deserialize_u16 => visit_u16(0),
        deserialize_u32 => visit_u32(0),
        deserialize_u64 => visit_u64(0),
        deserialize_f32 => visit_f32(0.0),
        deserialize_f64 => visit_f64(0.0),
        deserialize_char => visit_char('x'),
    }

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.record();
        v.visit_borrowed_str(if self.key { "NAME" } else { "x" })
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        self.deserialize_str(v)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        v.visit_some(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        v.visit_seq(Once(Some(self)))
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        let mut value = self.child("NAME");
        value.leaf = Some(self.path);
        v.visit_map(Entries {
            entries: vec![(Probe { key: true, ..self }, value)].into_iter(),
            value: None,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, DeError> {
        if name == SPANNED {
            return v.visit_map(SpannedMap {
                fields: fields.iter(),
                value: self,
            });
        }
        let entries: Vec<(Probe<'_>, Probe<'_>)> = fields
            .iter()
            .map(|f| {
                let mut key = self.child(f);
                key.key = true;
                key.path = f;
                (key, self.child(f))
            })
            .collect();
        v.visit_map(Entries {
            entries: entries.into_iter(),
            value: None,
        })
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, v: V) -> Result<V::Value, DeError> {
        // A struct's field name: the key probe's path is the field itself.
        v.visit_borrowed_str(keep(self.path.to_string()))
    }

    serde::forward_to_deserialize_any! {
        i128 u128 bytes byte_buf unit unit_struct newtype_struct tuple tuple_struct enum
        ignored_any
    }
}

struct Once<'a>(Option<Probe<'a>>);

impl<'de> SeqAccess<'de> for Once<'_> {
    type Error = DeError;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        self.0.take().map(|p| seed.deserialize(p)).transpose()
    }
}

struct Entries<'a> {
    entries: std::vec::IntoIter<(Probe<'a>, Probe<'a>)>,
    value: Option<Probe<'a>>,
}

impl<'de> MapAccess<'de> for Entries<'_> {
    type Error = DeError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(key).map(Some)
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, DeError> {
        seed.deserialize(self.value.take().expect("a key first"))
    }
}

/// A `Spanned<T>`: its start and end, then the value at the same path.
struct SpannedMap<'a> {
    fields: std::slice::Iter<'static, &'static str>,
    value: Probe<'a>,
}

impl<'de> MapAccess<'de> for SpannedMap<'_> {
    type Error = DeError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        match self.fields.as_slice().first() {
            Some(f) => seed
                .deserialize(BorrowedStrDeserializer::<DeError>::new(f))
                .map(Some),
            None => Ok(None),
        }
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, DeError> {
        let last = self.fields.len() == 1;
        self.fields.next();
        if last {
            seed.deserialize(self.value)
        } else {
            let at: UsizeDeserializer<DeError> = 0usize.into_deserializer();
            seed.deserialize(at)
        }
    }
}

/// The keys the page documents: `TABLE.KEY` for each `.TP` tag `\fBKEY\fR` under a
/// `.SS "[TABLE]"` heading.
fn documented(page: &str) -> BTreeSet<String> {
    let mut table: Option<String> = None;
    let mut out = BTreeSet::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        if let Some(h) = line.strip_prefix(".SS ") {
            table = h
                .trim_matches('"')
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .map(|t| t.replace("\\-", "-"));
        } else if line.starts_with(".SH") {
            table = None;
        } else if line == ".TP" {
            let (Some(t), Some(tag)) = (&table, lines.next()) else {
                continue;
            };
            if let Some(key) = tag
                .strip_prefix("\\fB")
                .and_then(|k| k.split_once("\\fR"))
                .map(|(k, _)| k.replace("\\-", "-"))
            {
                out.insert(if t.is_empty() {
                    key
                } else {
                    format!("{t}.{key}")
                });
            }
        }
    }
    out
}

fn page() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../packaging/man/wardcell-zones.toml.5"
    );
    std::fs::read_to_string(path).expect("packaging/man/wardcell-zones.toml.5")
}

#[test]
fn every_key_is_in_the_manual_page_and_only_those() {
    let accepted = accepted();
    // The probe sees the file's whole shape (a few keys of each kind, nested ones too).
    for k in [
        "zones.NAME.profile",
        "profiles.NAME.env.set",
        "profiles.NAME.network.internal",
        "credentials.NAME.secret.command",
        "audit.max_log_kib",
        "approval.plugin",
    ] {
        assert!(accepted.contains(k), "the probe missed {k}: {accepted:?}");
    }
    let documented = documented(&page());
    let missing: Vec<&String> = accepted.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "wardcell-zones.toml(5) does not document {missing:?}: add each under its table's \
         `.SS \"[TABLE]\"` heading as a `.TP` item whose tag starts with `\\fBKEY\\fR`"
    );
    let stale: Vec<&String> = documented.difference(&accepted).collect();
    assert!(
        stale.is_empty(),
        "wardcell-zones.toml(5) documents keys zones.toml does not accept: {stale:?}"
    );
}

#[test]
fn the_page_reader_reads_tables_and_keys() {
    let page = ".SH X\n.SS \"[zones.NAME]\"\n.TP\n\\fBprofile\\fR = \\fINAME\\fR\ntext\n.TP\n\\fBenv.deny\\fR = [...]\n.SS \"[audit]\"\n.TP\n\\fBmax_log_kib\\fR\n.SH Y\n.TP\n\\fBnot_a_key\\fR\n";
    let keys: Vec<String> = documented(page).into_iter().collect();
    assert_eq!(
        keys,
        [
            "audit.max_log_kib",
            "zones.NAME.env.deny",
            "zones.NAME.profile"
        ]
    );
}
