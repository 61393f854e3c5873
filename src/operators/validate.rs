//! Checks of a parent's spec that operators share, each failing with a
//! one-line message that names the field and says what to write instead.
//!
//! The CRD schema refuses most bad specs before they reach us; these checks
//! are the second line for objects stored before a schema change, for rules
//! a schema cannot express, and for hand-made requests.

/// A parent spec that the operator cannot act on. Answered with 422.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSpec {
    /// The JSON path of the field, `spec.replicas`.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl InvalidSpec {
    /// A problem with one field.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        InvalidSpec {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The longest label value Kubernetes accepts; names that go into labels
/// must fit.
pub const MAX_LABEL_VALUE: usize = 63;

/// An integer within an inclusive range.
pub fn in_range(field: &str, value: i64, min: i64, max: i64) -> Result<(), InvalidSpec> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(InvalidSpec::new(
            field,
            format!("{value} is out of range; use a whole number from {min} to {max}"),
        ))
    }
}

/// A container image reference: non-empty, no whitespace or control
/// characters, lower-case repository.
pub fn image(field: &str, value: &str) -> Result<(), InvalidSpec> {
    let fix = "use a reference like nginx:1.27 or registry.example.com/team/app@sha256:...";
    if value.is_empty() {
        return Err(InvalidSpec::new(field, format!("must not be empty; {fix}")));
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(InvalidSpec::new(
            field,
            format!("{value:?} contains whitespace; {fix}"),
        ));
    }
    if value.len() > 255 {
        return Err(InvalidSpec::new(
            field,
            format!(
                "is {} characters long, the limit is 255; {fix}",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// A name that will be used as a label value and as the prefix of child
/// names: a DNS-1123 label of at most `max` characters.
pub fn dns_label(field: &str, value: &str, max: usize) -> Result<(), InvalidSpec> {
    if !is_dns_label(value) {
        return Err(InvalidSpec::new(
            field,
            format!(
                "{value:?} is not a DNS-1123 label; use lower-case letters, digits and '-', starting and ending with a letter or digit"
            ),
        ));
    }
    if value.len() > max {
        return Err(InvalidSpec::new(
            field,
            format!(
                "{value:?} is {} characters long; use at most {max}",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// True for a DNS-1123 label: 1 to 63 lower-case alphanumerics or '-',
/// starting and ending alphanumeric.
pub fn is_dns_label(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !value.is_empty()
        && value.len() <= MAX_LABEL_VALUE
        && value.chars().all(|c| alnum(c) || c == '-')
        && value.starts_with(alnum)
        && value.ends_with(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        let cases = [
            ("web", true, "plain"),
            ("web-0", true, "digits and dash"),
            ("0web", true, "may start with a digit"),
            ("", false, "empty"),
            ("-web", false, "leading dash"),
            ("web-", false, "trailing dash"),
            ("Web", false, "upper case"),
            ("web.x", false, "dot"),
            (&"a".repeat(64), false, "too long"),
        ];
        for (value, want, reason) in cases {
            assert_eq!(is_dns_label(value), want, "{reason}");
        }
    }

    #[test]
    fn images() {
        assert!(image("spec.image", "nginx:1.27").is_ok());
        assert!(image("spec.image", "r.example.com:5000/a/b@sha256:abc").is_ok());
        let err = image("spec.image", "my image").unwrap_err();
        assert_eq!(err.field, "spec.image");
        assert!(
            err.to_string()
                .starts_with("spec.image: \"my image\" contains whitespace; use")
        );
        assert!(image("spec.image", "").is_err());
        assert!(image("spec.image", &"a".repeat(256)).is_err());
    }

    #[test]
    fn ranges() {
        assert!(in_range("spec.replicas", 0, 0, 10).is_ok());
        assert!(in_range("spec.replicas", 10, 0, 10).is_ok());
        assert_eq!(
            in_range("spec.replicas", -1, 0, 10)
                .unwrap_err()
                .to_string(),
            "spec.replicas: -1 is out of range; use a whole number from 0 to 10"
        );
    }
}
