//! Kubernetes' rules for names, which the call checks on every parent
//! before an operator sees it and operators check more strictly.

use crate::hook::quote::quote;
use crate::operator::InvalidSpec;

/// The longest label value Kubernetes accepts; names that go into labels
/// must fit.
pub const MAX_LABEL_VALUE: usize = 63;

/// A name that will be used as a label value and as the prefix of child
/// names: a DNS-1123 label of at most `max` characters.
pub fn dns_label(field: &str, value: &str, max: usize) -> Result<(), InvalidSpec> {
    if value.len() > max {
        return Err(InvalidSpec::new(
            field,
            format!(
                "{} is {} characters long; use at most {max}",
                quote(value),
                value.len()
            ),
        ));
    }
    if !is_dns_label(value) {
        return Err(InvalidSpec::new(
            field,
            format!(
                "{} is not a DNS-1123 label; use lower-case letters, digits and '-', starting and ending with a letter or digit",
                quote(value)
            ),
        ));
    }
    Ok(())
}

/// True for a DNS-1123 subdomain, as most object names are: at most 253
/// characters of DNS-1123 labels joined by '.'.
pub fn is_dns_subdomain(value: &str) -> bool {
    value.len() <= 253 && value.split('.').all(is_dns_label)
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

/// True for a label key: an optional DNS-1123 subdomain prefix and '/',
/// then a name of 1 to 63 letters, digits, '-', '_' or '.', starting and
/// ending with a letter or digit (`kubernetes.io/hostname`, `disk`).
pub fn is_label_key(value: &str) -> bool {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

/// True for a label value: empty, or at most 63 letters, digits, '-', '_'
/// or '.', starting and ending with a letter or digit.
pub fn is_label_value(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    value.is_empty()
        || (value.len() <= MAX_LABEL_VALUE
            && value
                .chars()
                .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')
            && value.starts_with(alnum)
            && value.ends_with(alnum))
}
