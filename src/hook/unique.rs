//! Refuses JSON with a repeated key anywhere in it.
//!
//! `serde_json` keeps the last of two equal keys without a word, so
//! `{"replicas": 3, "replicas": 0}` would quietly mean 0 and a 200 answer
//! would drop three pods. Which value the sender meant cannot be known, so
//! the whole body is refused, naming the path of the repeated key.

use std::borrow::Cow;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

/// Checks that no object in `body` repeats a key. Syntax errors are left to
/// the decoder that runs next, which reports them with their position.
///
/// Every call pays for one scan of the bytes ([`scan`]); only a body the
/// scan cannot clear (a repeated key, an escaped key, or broken JSON) is
/// walked again by serde, keeping the path, to say where.
pub(super) fn check(body: &[u8]) -> Result<(), String> {
    match scan(body) {
        Scan::Clean => return Ok(()),
        Scan::TooDeep => return Err(too_deep()),
        Scan::Unsure => {}
    }
    let mut path = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    match (Walk { path: &mut path }).deserialize(&mut de) {
        Err(err) if err.is_data() => Err(err.to_string()),
        // serde_json names this error only in its text.
        Err(err) if err.to_string().starts_with("recursion limit exceeded") => Err(too_deep()),
        _ => Ok(()),
    }
}

fn too_deep() -> String {
    format!(
        "arrays and objects nest more than {MAX_DEPTH} deep; no hook request does, send one as Metacontroller does"
    )
}

/// What a scan of the bytes found.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    /// No object repeats a key, if the body is JSON at all (the scan skips
    /// values without checking them; the decoder that runs next does).
    Clean,
    /// A key repeats, or the scan could not tell (a key with escapes, which
    /// must be decoded to compare, or bytes that are not JSON).
    Unsure,
    /// Arrays and objects nest deeper than [`MAX_DEPTH`]: refused whatever
    /// else is in the body, as serde's walk could not look inside.
    TooDeep,
}

/// The deepest nesting of arrays and objects accepted: `serde_json`'s own
/// limit, past which its walk cannot check keys and its decoder refuses.
/// It also bounds the scan's stack.
const MAX_DEPTH: usize = 127;

/// Walks the JSON text byte by byte, with a stack of at most [`MAX_DEPTH`]
/// instead of recursion, comparing object keys as raw bytes. Values
/// are skipped, not parsed: numbers and literals up to the next delimiter,
/// strings up to their closing quote.
fn scan(body: &[u8]) -> Scan {
    let mut scanner = Scanner {
        body,
        at: 0,
        open: Vec::new(),
        keys: Vec::new(),
        too_deep: false,
    };
    match scanner.run() {
        Some(()) => Scan::Clean,
        None if scanner.too_deep => Scan::TooDeep,
        None => Scan::Unsure,
    }
}

/// An open object (where its keys start on the key stack, and its hash set
/// once it has many) or an open array.
enum Open<'b> {
    Object(usize, Option<HashSet<&'b [u8]>>),
    Array,
}

struct Scanner<'b> {
    body: &'b [u8],
    at: usize,
    open: Vec<Open<'b>>,
    /// The keys of every open object, innermost last.
    keys: Vec<&'b [u8]>,
    /// Set when the scan stopped at [`MAX_DEPTH`].
    too_deep: bool,
}

impl<'b> Scanner<'b> {
    /// `Some` when the whole body is one value with no repeated key.
    fn run(&mut self) -> Option<()> {
        loop {
            self.value()?;
            // After a value: the next one, or the end of what holds it.
            loop {
                self.skip_space();
                match (self.open.last(), self.body.get(self.at)) {
                    (None, None) => return Some(()),
                    (Some(Open::Array), Some(b',')) => {
                        self.at += 1;
                        break;
                    }
                    (Some(Open::Object(..)), Some(b',')) => {
                        self.at += 1;
                        self.key()?;
                        break;
                    }
                    (Some(Open::Array), Some(b']')) => {
                        self.open.pop();
                        self.at += 1;
                    }
                    (Some(Open::Object(start, _)), Some(b'}')) => {
                        self.keys.truncate(*start);
                        self.open.pop();
                        self.at += 1;
                    }
                    _ => return None,
                }
            }
        }
    }

    /// Steps over a scalar, or into an object (past its first key) or an
    /// array (up to its first value), as often as they nest.
    fn value(&mut self) -> Option<()> {
        loop {
            self.skip_space();
            match *self.body.get(self.at)? {
                b'{' => {
                    if self.empty(b'}') {
                        return Some(());
                    }
                    self.enter(Open::Object(self.keys.len(), None))?;
                    self.key()?;
                }
                b'[' => {
                    if self.empty(b']') {
                        return Some(());
                    }
                    self.enter(Open::Array)?;
                }
                b'"' => {
                    self.string()?;
                    return Some(());
                }
                _ => {
                    let rest = &self.body[self.at..];
                    let len = rest
                        .iter()
                        .position(|&b| matches!(b, b',' | b']' | b'}') || is_space(b))
                        .unwrap_or(rest.len());
                    if len == 0 {
                        return None;
                    }
                    self.at += len;
                    return Some(());
                }
            }
        }
    }

    /// Reads a key of the innermost open object and the colon after it;
    /// `None` when the key repeats, has escapes, or is not there.
    fn key(&mut self) -> Option<()> {
        self.skip_space();
        if self.body.get(self.at) != Some(&b'"') {
            return None;
        }
        let (key, escaped) = self.string()?;
        if escaped {
            return None;
        }
        self.skip_space();
        if self.body.get(self.at) != Some(&b':') {
            return None;
        }
        self.at += 1;
        let Some(Open::Object(start, many)) = self.open.last_mut() else {
            return None;
        };
        match many {
            Some(set) => set.insert(key).then_some(()),
            None if self.keys[*start..].contains(&key) => None,
            None => {
                self.keys.push(key);
                if self.keys.len() - *start > FEW_KEYS {
                    *many = Some(self.keys.drain(*start..).collect());
                }
                Some(())
            }
        }
    }

    /// Steps over the string at the cursor: its raw bytes and whether they
    /// hold escapes, or `None` when it has no end.
    fn string(&mut self) -> Option<(&'b [u8], bool)> {
        let start = self.at + 1;
        let mut at = start;
        let mut escaped = false;
        loop {
            at += memchr::memchr2(b'"', b'\\', self.body.get(at..)?)?;
            if self.body[at] == b'"' {
                self.at = at + 1;
                return Some((&self.body[start..at], escaped));
            }
            escaped = true;
            at += 2;
        }
    }

    /// Steps past the opening bracket at the cursor; true, and past `close`
    /// too, when nothing but space stands between them.
    fn empty(&mut self, close: u8) -> bool {
        self.at += 1;
        self.skip_space();
        let empty = self.body.get(self.at) == Some(&close);
        if empty {
            self.at += 1;
        }
        empty
    }

    /// Opens an array or object, or stops the scan past [`MAX_DEPTH`].
    fn enter(&mut self, open: Open<'b>) -> Option<()> {
        if self.open.len() == MAX_DEPTH {
            self.too_deep = true;
            return None;
        }
        self.open.push(open);
        Some(())
    }

    fn skip_space(&mut self) {
        while self.body.get(self.at).copied().is_some_and(is_space) {
            self.at += 1;
        }
    }
}

/// The scan checks objects with more keys than this with a hash set,
/// smaller ones by comparing with the keys before (which allocates nothing).
const FEW_KEYS: usize = 24;

/// One step of serde's walk over any JSON value, for the message; only a
/// body the scan could not clear is walked. `path` holds the keys and
/// indices from the root.
struct Walk<'w> {
    path: &'w mut Vec<String>,
}

impl Walk<'_> {
    /// The walk one level down, under `step`.
    fn enter(&mut self, step: String) -> Walk<'_> {
        self.path.push(step);
        Walk {
            path: &mut *self.path,
        }
    }

    fn leave(&mut self) {
        self.path.pop();
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        for index in 0usize.. {
            let more = seq.next_element_seed(self.enter(index.to_string()))?;
            self.leave();
            if more.is_none() {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut seen: HashSet<Cow<'de, str>> = HashSet::new();
        while let Some(Key(key)) = map.next_key()? {
            if seen.contains(&key) {
                let at = match self.path.is_empty() {
                    true => String::new(),
                    false => format!("{}: ", self.path.join(".")),
                };
                return Err(de::Error::custom(format_args!(
                    "{at}the key {key:?} appears twice; send each key once"
                )));
            }
            // The path names the key in a message: a user's key, so cut.
            map.next_value_seed(self.enter(super::quote::cut(&key).into_owned()))?;
            self.leave();
            seen.insert(key);
        }
        Ok(())
    }
}

/// JSON's whitespace.
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

/// An object key, borrowed from the body unless it had escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::{Scan, Walk, check, scan};
    use proptest::prelude::*;
    use serde::de::DeserializeSeed;

    /// What serde's own walk says of a body: `true` when a key repeats.
    fn serde_finds_a_repeat(body: &str) -> bool {
        let mut path = Vec::new();
        let mut de = serde_json::Deserializer::from_str(body);
        let walk = Walk { path: &mut path };
        matches!(walk.deserialize(&mut de), Err(err) if err.is_data())
    }

    /// JSON text with keys drawn from a few names (so objects often repeat
    /// one), spacing and escapes in values, nested a few levels deep.
    fn json_text() -> impl Strategy<Value = String> {
        let space = prop::sample::select(vec!["", " ", "\n ", "\t"]);
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            any::<i32>().prop_map(|n| n.to_string()),
            Just("-1.5e3".to_string()),
            Just(r#""plain""#.to_string()),
            Just(r#""with \"quotes\" and \\ and \n""#.to_string()),
            Just(r#""ends in \\""#.to_string()),
        ];
        leaf.prop_recursive(4, 48, 8, move |inner| {
            let key = prop::sample::select(vec!["a", "b", "c", "kind", "{", "[", ":", ","]);
            prop_oneof![
                (prop::collection::vec(inner.clone(), 0..6), space.clone())
                    .prop_map(|(items, s)| format!("[{s}{}{s}]", items.join(&format!("{s},{s}")))),
                (
                    prop::collection::vec((key, inner), 0..(2 * super::FEW_KEYS)),
                    space.clone()
                )
                    .prop_map(|(fields, s)| {
                        let fields: Vec<String> = fields
                            .into_iter()
                            .map(|(k, v)| format!("{k:?}{s}:{s}{v}"))
                            .collect();
                        format!("{{{s}{}{s}}}", fields.join(","))
                    }),
            ]
        })
    }

    proptest! {
        /// The byte scan clears exactly the bodies serde's walk clears.
        #[test]
        fn the_scan_agrees_with_serde(body in json_text()) {
            prop_assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok(), "{}", body);
            prop_assert_eq!(scan(body.as_bytes()) == Scan::Clean, !serde_finds_a_repeat(&body), "{}", body);
        }

        /// Cut anywhere, a body the scan clears either does not parse (the
        /// decoder then refuses it, with its position) or repeats no key.
        #[test]
        fn broken_bodies_cleared_are_refused_by_the_decoder(body in json_text(), cut in 0.0..1.0f64) {
            // The generated text is ASCII, so any byte is a boundary.
            let cut = &body[..(body.len() as f64 * cut) as usize];
            if scan(cut.as_bytes()) == Scan::Clean {
                let parses = serde_json::from_str::<serde_json::Value>(cut).is_ok();
                prop_assert!(!parses || !serde_finds_a_repeat(cut), "{}", cut);
            }
        }
    }

    #[test]
    fn deep_nesting_is_refused_and_escaped_keys_go_to_serde() {
        let nest = |depth: usize| format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        // The same limit as serde_json's.
        assert!(serde_json::from_str::<serde_json::Value>(&nest(super::MAX_DEPTH)).is_ok());
        assert!(serde_json::from_str::<serde_json::Value>(&nest(super::MAX_DEPTH + 1)).is_err());
        assert_eq!(scan(nest(super::MAX_DEPTH).as_bytes()), Scan::Clean);
        for body in [
            nest(super::MAX_DEPTH + 1),
            nest(100_000),
            "[".repeat(1_000_000),
        ] {
            assert_eq!(scan(body.as_bytes()), Scan::TooDeep);
            let err = check(body.as_bytes()).unwrap_err();
            assert!(err.contains("nest more than 127 deep"), "{err}");
        }
        // A repeat serde's walk could not reach (it stops at the same depth)
        // is refused all the same.
        let hidden = format!(
            r#"{{"parent":{}{{"a":1,"a":2}}{}}}"#,
            r#"{"f":"#.repeat(200),
            "}".repeat(200)
        );
        assert!(check(hidden.as_bytes()).is_err());
        assert_eq!(scan(br#"{"\u0061":1}"#), Scan::Unsure);
        assert!(check(br#"{"\u0061":1,"b":2}"#).is_ok());
    }

    #[test]
    fn repeated_keys_are_refused_at_any_depth_with_their_path() {
        struct Case<'a> {
            reason: &'static str,
            body: &'a str,
            want: Result<(), &'static str>,
        }
        let cases = [
            Case {
                reason: "distinct keys pass",
                body: r#"{"a":{"b":1,"c":[{"d":1},{"d":2}]}}"#,
                want: Ok(()),
            },
            Case {
                reason: "top level",
                body: r#"{"parent":{},"parent":{}}"#,
                want: Err(r#"the key "parent" appears twice; send each key once"#),
            },
            Case {
                reason: "inside the parent",
                body: r#"{"parent":{"spec":{"replicas":3,"replicas":0}}}"#,
                want: Err(r#"parent.spec: the key "replicas" appears twice; send each key once"#),
            },
            Case {
                reason: "inside an array",
                body: r#"{"a":[{"x":1},{"x":1,"x":2}]}"#,
                want: Err(r#"a.1: the key "x" appears twice; send each key once"#),
            },
            Case {
                reason: "escaped and plain spellings are the same key",
                body: r#"{"a":1,"\u0061":2}"#,
                want: Err(r#"the key "a" appears twice; send each key once"#),
            },
            Case {
                reason: "an object of many keys, the repeat far from the first",
                body: &format!(
                    r#"{{"a":{{{},"k3":0}}}}"#,
                    (0..100)
                        .map(|i| format!(r#""k{i}":{{"k3":{i}}}"#))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                want: Err(r#"a: the key "k3" appears twice; send each key once"#),
            },
            Case {
                reason: "many keys, each once, in nested objects of few",
                body: &format!(
                    r#"{{"a":{{{}}},"k1":[{{"k1":1,"k2":2}}]}}"#,
                    (0..100)
                        .map(|i| format!(r#""k{i}":{{"k1":{i},"k2":{{"k1":[]}}}}"#))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                want: Ok(()),
            },
            Case {
                reason: "syntax errors are left to the decoder",
                body: r#"{"a":"#,
                want: Ok(()),
            },
        ];
        for case in cases {
            let got = check(case.body.as_bytes());
            let got = got.as_ref().map_err(|e| {
                // serde_json appends the position; the path is what matters.
                e.split(" at line ").next().unwrap()
            });
            assert_eq!(got.copied(), case.want, "{}", case.reason);
        }
    }
}
