//! How a user's value appears in a message: cut to [`QUOTE_CHARS`]
//! characters, enough to recognise it, never enough to turn an error into a
//! large answer or log line.
//!
//! Messages name user values in three ways: quoted by us ([`quote`]), quoted
//! by serde (`string "…"`, `` unknown variant `…` ``), and as a key in a
//! field path. [`cut_quoted`] cuts the first two in a finished message; the
//! path is built from keys already [`cut`].

use std::borrow::Cow;

/// The longest prefix of a user's value an error message quotes.
pub const QUOTE_CHARS: usize = 64;

/// What marks a value as cut.
const ELLIPSIS: char = '…';

/// A user's value quoted for a message, cut to [`QUOTE_CHARS`] characters.
pub fn quote(value: &str) -> String {
    match value.char_indices().nth(QUOTE_CHARS) {
        Some((at, _)) => format!("{:?}{ELLIPSIS}", &value[..at]),
        None => format!("{value:?}"),
    }
}

/// A user's value (a map key in a path) cut to [`QUOTE_CHARS`] characters,
/// unquoted.
pub fn cut(value: &str) -> Cow<'_, str> {
    cut_to(value, QUOTE_CHARS)
}

/// `parent.key`: the path of a field under a user's map key, the key cut
/// to [`QUOTE_CHARS`] characters.
pub fn key_path(parent: &str, key: &str) -> String {
    format!("{parent}.{}", cut(key))
}

/// `value` cut to `max` characters, marked as cut when it was.
pub fn cut_to(value: &str, max: usize) -> Cow<'_, str> {
    match value.char_indices().nth(max) {
        Some((at, _)) => Cow::Owned(format!("{}{ELLIPSIS}", &value[..at])),
        None => Cow::Borrowed(value),
    }
}

/// A message with every quoted run cut to [`QUOTE_CHARS`] characters: a
/// `"…"` run as Rust's `{:?}` and serde write it (escapes count as one
/// character and are never split), and a `` `…` `` run as serde writes
/// unknown variants and fields. Whatever formatted the value, the answer
/// keeps the promise.
pub fn cut_quoted(message: &str) -> Cow<'_, str> {
    if !message.contains(['"', '`']) {
        return Cow::Borrowed(message);
    }
    let message = cut_serde_names(message);
    let mut out = String::with_capacity(message.len().min(4096));
    let mut rest = message.as_ref();
    while let Some(open) = rest.find(['"', '`']) {
        let quote_char = rest[open..].chars().next().unwrap_or('"');
        out.push_str(&rest[..=open]);
        let inside = &rest[open + 1..];
        let end = if quote_char == '"' {
            escaped_end(inside)
        } else {
            inside.find('`').unwrap_or(inside.len())
        };
        let (content, after) = inside.split_at(end);
        match nth_unit(content, QUOTE_CHARS, quote_char == '"') {
            Some(at) => {
                out.push_str(&content[..at]);
                out.push_str(&after[..after.len().min(1)]);
                out.push(ELLIPSIS);
                rest = &after[after.len().min(1)..];
            }
            None => {
                out.push_str(content);
                out.push_str(&after[..after.len().min(1)]);
                rest = &after[after.len().min(1)..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Where a `{:?}`-quoted run ends: the first `"` not escaped by a backslash.
fn escaped_end(inside: &str) -> usize {
    let mut escaped = false;
    for (at, c) in inside.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return at,
            _ => {}
        }
    }
    inside.len()
}

/// The byte offset after `n` characters of `content`, an escape (`\n`,
/// `\"`, `\u{1f600}`) counting as one; None when it is not longer.
fn nth_unit(content: &str, n: usize, escapes: bool) -> Option<usize> {
    let mut chars = content.char_indices().peekable();
    let mut units = 0;
    while let Some((_, c)) = chars.next() {
        if escapes && c == '\\' && chars.next().is_some_and(|(_, c)| c == 'u') {
            for (_, c) in chars.by_ref() {
                if c == '}' {
                    break;
                }
            }
        }
        units += 1;
        if units == n {
            return chars.peek().map(|&(at, _)| at);
        }
    }
    None
}

/// serde writes unknown names raw between backticks
/// (`` unknown variant `…`, expected one of `a`, `b` ``), so a name that
/// holds backticks itself would not be one run: cut it by where serde's
/// own words resume.
fn cut_serde_names(message: &str) -> Cow<'_, str> {
    for lead in ["unknown variant `", "unknown field `"] {
        let Some(start) = message.find(lead).map(|at| at + lead.len()) else {
            continue;
        };
        let tail = &message[start..];
        let end = ["`, expected", "`, there are no"]
            .iter()
            .filter_map(|word| tail.rfind(word))
            .min();
        if let Some(end) = end {
            let name = &tail[..end];
            if let Cow::Owned(short) = cut(name) {
                let short = short.replace('`', "'");
                return Cow::Owned(format!("{}{short}{}", &message[..start], &tail[end..]));
            }
        }
    }
    Cow::Borrowed(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The longest run of `value` that `message` contains.
    fn longest_run(message: &str, value: &str) -> usize {
        let chars: Vec<char> = value.chars().collect();
        (1..=chars.len())
            .take_while(|&n| {
                chars
                    .windows(n)
                    .any(|w| message.contains(&w.iter().collect::<String>()))
            })
            .last()
            .unwrap_or(0)
    }

    #[test]
    fn quoted_runs_are_cut() {
        let value: String = ('a'..='z').cycle().take(1000).collect();
        let cases = [
            format!("spec.size: invalid type: string {value:?}, expected i32"),
            format!("unknown variant `{value}`, expected one of `small`, `large`"),
            format!("unknown variant `{value}`{value}`, expected `x`"),
            format!("unknown field `{value}`, there are no fields"),
            format!("the key {:?} appears twice", format!("\"{value}\\")),
            format!("unterminated {value:?}")
                .trim_end_matches('"')
                .to_string(),
        ];
        for message in cases {
            let got = cut_quoted(&message);
            assert!(longest_run(&got, &value) <= QUOTE_CHARS, "{got}");
            assert!(got.contains(ELLIPSIS), "{got}");
        }
    }

    #[test]
    fn short_quotes_and_serde_words_stay() {
        for message in [
            "no quotes at all",
            r#"spec.replicas: invalid type: string "three", expected i32"#,
            "unknown variant `huge`, expected one of `small`, `medium`, `large`",
            r#"the key "a\"b" appears twice; write five fields like "0 2 * * *""#,
        ] {
            assert_eq!(cut_quoted(message), message);
        }
    }

    #[test]
    fn escapes_are_never_split() {
        let value = "\u{1}".repeat(100);
        let got = cut_quoted(&format!("{value:?}")).into_owned();
        assert_eq!(got, format!("{:?}…", "\u{1}".repeat(QUOTE_CHARS)));
    }

    #[test]
    fn quote_and_cut_keep_64_characters() {
        let long = "é".repeat(100);
        assert_eq!(quote(&long), format!("{:?}…", "é".repeat(QUOTE_CHARS)));
        assert_eq!(cut(&long), format!("{}…", "é".repeat(QUOTE_CHARS)));
        assert_eq!(cut("short"), "short");
        assert_eq!(
            key_path("spec.resources.requests", &"q".repeat(900)),
            format!("spec.resources.requests.{}…", "q".repeat(QUOTE_CHARS))
        );
    }
}
