//! What the kubelet does to a container's `command`, `args` and `env`
//! values before the program sees them, and how a user's value passes
//! through it as written.
//!
//! The kubelet replaces `$(NAME)` by the value of the container's variable
//! `NAME` (kept as written when there is none) and `$$` by `$`
//! (Kubernetes' `third_party/forked/golang/expansion`). A value from a spec
//! written there as it is could name the container's secret-backed
//! variables: `$(POSTGRES_PASSWORD)` as a server parameter would put the
//! password on the server's command line. So every user value that lands
//! in a command, an argument or an environment value goes through
//! [`literal`] (the builders do it in one place each: [`env`] for variables,
//! [`literals`] for arguments), and what is read back from an observed
//! child goes through [`as_seen`]. Our own scripts refer to no variable this
//! way; a property test holds every child of every operator to that.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::EnvVar;

/// `value` written so that the kubelet's expansion gives it back as it is:
/// each `$` that could start something (`$$`, `$(`, or `$` before a
/// character that is not ASCII, which older kubelets split byte-wise)
/// doubled. A `$` before anything else, and so every value that has
/// nothing to expand, is kept: an object built before this rule keeps its
/// bytes and no instance restarts for it.
pub fn literal(value: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut kept = 0;
    for (at, _) in value.match_indices('$') {
        let next = value[at + 1..].chars().next();
        if next.is_some_and(|c| c == '$' || c == '(' || !c.is_ascii()) {
            out.push_str(&value[kept..=at]);
            out.push('$');
            kept = at + 1;
        }
    }
    if kept == 0 {
        return Cow::Borrowed(value);
    }
    out.push_str(&value[kept..]);
    Cow::Owned(out)
}

/// [`literal`] of each value, for a container's command or arguments.
pub fn literals<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> Vec<String> {
    values
        .into_iter()
        .map(|value| literal(value.as_ref()).into_owned())
        .collect()
}

/// `/bin/sh -c <script>`, written so that the shell gets the script as it
/// is: the kubelet's expansion applies to the command of a container and of
/// an exec probe, and would turn a script's `$$` (the shell's own pid)
/// into `$`.
pub fn shell_command(script: &str) -> Vec<String> {
    vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        literal(script).into_owned(),
    ]
}

/// An environment variable whose program sees `value` as written.
pub fn env(name: &str, value: impl AsRef<str>) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(literal(value.as_ref()).into_owned()),
        value_from: None,
    }
}

/// The kubelet's expansion of `value`: `$$` is `$`, `$(NAME)` is
/// `lookup(NAME)` or stays as written when that is `None`, an unclosed
/// `$(` and a `$` before anything else stay.
pub fn expand<'a>(value: &str, mut lookup: impl FnMut(&str) -> Option<&'a str>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let Some(next) = after.chars().next() else {
            out.push('$');
            rest = after;
            break;
        };
        match next {
            '$' => {
                out.push('$');
                rest = &after[1..];
            }
            '(' => match after.find(')') {
                Some(close) => {
                    let name = &after[1..close];
                    match lookup(name) {
                        Some(found) => out.push_str(found),
                        None => {
                            out.push('$');
                            out.push_str(&after[..=close]);
                        }
                    }
                    rest = &after[close + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = &after[1..];
                }
            },
            other => {
                out.push('$');
                out.push(other);
                rest = &after[other.len_utf8()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// What the program sees of a value with no variable defined: the inverse
/// of [`literal`], for what is read back from an observed child.
pub fn as_seen(value: &str) -> Cow<'_, str> {
    match value.contains("$$") {
        true => Cow::Owned(expand(value, |_| None)),
        false => Cow::Borrowed(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expansion with `A` defined as `secret`.
    fn kubelet(value: &str) -> String {
        expand(value, |name| (name == "A").then_some("secret"))
    }

    #[test]
    fn expansion_is_the_kubelets() {
        // (written, what the program sees), from the rule's own tests.
        let cases = [
            ("$(A)", "secret"),
            ("x$(A)y", "xsecrety"),
            ("$$(A)", "$(A)"),
            ("$$$(A)", "$secret"),
            ("$(B)", "$(B)"),
            ("$", "$"),
            ("a$b", "a$b"),
            ("$(", "$("),
            ("$(A", "$(A"),
            ("$$", "$"),
            ("$$$", "$$"),
            ("$()", "$()"),
            ("$é", "$é"),
            ("", ""),
        ];
        for (written, seen) in cases {
            assert_eq!(kubelet(written), seen, "{written}");
        }
    }

    #[test]
    fn a_literal_reaches_the_program_as_written() {
        let cases = [
            ("$(A)", "$$(A)"),
            ("$$(A)", "$$$$(A)"),
            ("$", "$"),
            ("a$b", "a$b"),
            ("$(", "$$("),
            ("$(A", "$$(A"),
            ("$$", "$$$"),
            ("$é", "$$é"),
            ("pa$$word$", "pa$$$word$"),
            ("no dollar", "no dollar"),
        ];
        for (value, written) in cases {
            assert_eq!(literal(value), written, "{value}");
            assert_eq!(kubelet(written), value, "{value}");
            assert_eq!(as_seen(written), value, "{value}");
        }
        assert!(matches!(literal("a$b"), Cow::Borrowed(_)));
        assert_eq!(env("X", "$(A)").value.as_deref(), Some("$$(A)"));
        assert_eq!(literals(["-c", "x=$(A)"]), ["-c", "x=$$(A)"]);
    }

    proptest::proptest! {
        #[test]
        fn any_literal_expands_to_itself(value in "[$()Aaé]{0,12}|.{0,24}") {
            proptest::prop_assert_eq!(kubelet(&literal(&value)), value.clone());
            proptest::prop_assert_eq!(as_seen(&literal(&value)).into_owned(), value);
        }
    }
}
