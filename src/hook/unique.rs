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
/// Every call pays for one walk that keeps no path and allocates only for
/// objects of many keys; only a body with a repeated key is walked again,
/// keeping the path, to say where.
pub fn check(body: &[u8]) -> Result<(), String> {
    let walk = |path: Option<&mut Vec<String>>| {
        let mut keys = Vec::new();
        let mut de = serde_json::Deserializer::from_slice(body);
        match (Walk {
            keys: &mut keys,
            path,
        })
        .deserialize(&mut de)
        {
            Err(err) if err.is_data() => Err(err.to_string()),
            _ => Ok(()),
        }
    };
    walk(None).or_else(|_| walk(Some(&mut Vec::new())))
}

/// Objects with more keys than this are checked with a hash set; smaller
/// ones by comparing with the keys before, which allocates nothing.
const FEW_KEYS: usize = 24;

/// One step of a walk over any JSON value. `keys` is one stack shared by
/// the whole walk: an object pushes its keys on top and takes them off when
/// it ends. `path`, when kept, holds the keys and indices from the root.
struct Walk<'w, 'de> {
    keys: &'w mut Vec<Cow<'de, str>>,
    path: Option<&'w mut Vec<String>>,
}

impl<'de> Walk<'_, 'de> {
    /// The walk one level down, under `step` when the path is kept.
    fn enter(&mut self, step: impl FnOnce() -> String) -> Walk<'_, 'de> {
        if let Some(path) = self.path.as_deref_mut() {
            path.push(step());
        }
        let path = self.path.as_deref_mut();
        Walk {
            keys: &mut *self.keys,
            path,
        }
    }

    fn leave(&mut self) {
        if let Some(path) = self.path.as_deref_mut() {
            path.pop();
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, 'de> {
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
            let more = seq.next_element_seed(self.enter(|| index.to_string()))?;
            self.leave();
            if more.is_none() {
                break;
            }
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let start = self.keys.len();
        let mut many: Option<HashSet<Cow<'de, str>>> = None;
        let result = loop {
            let Some(Key(key)) = map.next_key()? else {
                break Ok(());
            };
            let repeated = match &mut many {
                Some(set) => !set.insert(key.clone()),
                None => self.keys[start..].contains(&key),
            };
            if repeated {
                let at = match self.path.as_deref() {
                    Some(path) if !path.is_empty() => format!("{}: ", path.join(".")),
                    _ => String::new(),
                };
                break Err(de::Error::custom(format_args!(
                    "{at}the key {key:?} appears twice; send each key once"
                )));
            }
            let step = self.path.is_some().then(|| key.to_string());
            if many.is_none() {
                self.keys.push(key);
                if self.keys.len() - start > FEW_KEYS {
                    many = Some(self.keys.drain(start..).collect());
                }
            }
            map.next_value_seed(self.enter(|| step.unwrap_or_default()))?;
            self.leave();
        };
        self.keys.truncate(start);
        result
    }
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
    use super::check;

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
