//! Checks of a parent's spec that operators share, each failing with a
//! one-line message that names the field and says what to write instead.
//!
//! The CRD schema refuses most bad specs before they reach us; these checks
//! are the second line for objects stored before a schema change, for rules
//! a schema cannot express, and for hand-made requests.

pub use crate::hook::quote::{QUOTE_CHARS, quote};
pub use crate::operator::InvalidSpec;
pub use crate::operator::names::{
    MAX_LABEL_VALUE, dns_label, is_dns_label, is_dns_subdomain, is_label_key, is_label_value,
};

use k8s_openapi::jiff::Timestamp;
use k8s_openapi::jiff::tz::TimeZone;

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

/// The name of an object the spec refers to in the parent's namespace (a
/// Secret, a ServiceAccount, a StatefulSet): a DNS-1123 subdomain, as the
/// API server checks it where the name is used, so a child carrying it is
/// never refused.
pub fn object_name(field: &str, value: &str, kind: &str) -> Result<(), InvalidSpec> {
    match is_dns_subdomain(value) {
        true => Ok(()),
        false => Err(InvalidSpec::new(
            field,
            format!(
                "{} is not a {kind}'s name; name one in this namespace (lower-case letters, digits, '-' and '.', at most 253)",
                quote(value)
            ),
        )),
    }
}

/// The IANA time zone names a CronJob's `timeZone` may be (what the API
/// server's Go `time.LoadLocation` finds in its embedded tz database):
/// tzdata's Zone and Link names, bundled, since the operator has no tz
/// database of its own and must not depend on the host's.
const TIME_ZONES: &str = include_str!("time_zones.txt");

/// A time zone the API server accepts for a CronJob: an IANA name such as
/// Europe/Berlin (`Local` is the controller's own and is refused there).
pub fn time_zone(field: &str, value: &str) -> Result<(), InvalidSpec> {
    let known = TIME_ZONES
        .lines()
        .filter(|l| !l.starts_with('#'))
        .any(|l| l == value);
    match known {
        true => Ok(()),
        false => Err(InvalidSpec::new(
            field,
            format!(
                "{} is not an IANA time zone; write one like Europe/Berlin, America/New_York or UTC",
                quote(value)
            ),
        )),
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
            format!("{} contains whitespace; {fix}", quote(value)),
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

/// The cron macros Kubernetes CronJobs accept besides five fields.
pub const CRON_MACROS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// A schedule [`cron`] accepted, as croner reads it: a macro as the five
/// fields it stands for (croner does not know `@midnight`). `None` for
/// one that does not parse.
pub fn parsed_cron(schedule: &str) -> Option<croner::Cron> {
    let schedule = schedule.trim();
    let fields = match schedule {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        other => other,
    };
    fields.parse().ok()
}

/// The most recent time of `cron` at or before `at`, read in UTC.
pub fn latest_run(cron: &croner::Cron, at: Timestamp) -> Option<Timestamp> {
    let at = at.to_zoned(TimeZone::UTC);
    if cron.is_time_matching(&at).unwrap_or(false) {
        return Some(at.timestamp());
    }
    cron.iter_before(at).next().map(|z| z.timestamp())
}

/// A CronJob schedule as Kubernetes parses it: five fields (minute, hour,
/// day of month, month, day of week) or one of [`CRON_MACROS`]. Written out
/// rather than taken from a cron crate because it must accept exactly what
/// the CronJob controller accepts, no more (seconds, `L`, `#`) and no less.
pub fn cron(field: &str, schedule: &str) -> Result<(), InvalidSpec> {
    let fix = "write five fields like \"0 2 * * *\" (minute hour day-of-month month day-of-week) or @daily";
    let fail = |why: String| {
        Err(InvalidSpec::new(
            field,
            format!("{}: {why}; {fix}", quote(schedule)),
        ))
    };
    let trimmed = schedule.trim();
    if trimmed.starts_with("TZ=") || trimmed.starts_with("CRON_TZ=") {
        return fail("a time zone in the schedule is not supported, use spec.timeZone".into());
    }
    if trimmed.starts_with('@') {
        return if CRON_MACROS.contains(&trimmed) {
            Ok(())
        } else {
            fail(format!("unknown macro {}", quote(trimmed)))
        };
    }
    let fields: Vec<&str> = trimmed.split_whitespace().collect();
    if fields.len() != 5 {
        return fail(format!("has {} fields, not 5", fields.len()));
    }
    for (text, spec) in fields.iter().zip(&CRON_FIELDS) {
        for part in text.split(',') {
            if let Err(why) = cron_part(part, spec) {
                return fail(why);
            }
        }
    }
    Ok(())
}

/// One of a schedule's five fields: its name, its range, and the names its
/// values may have instead of numbers (the first name meaning `first`).
struct CronField {
    what: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    first: u32,
}

impl CronField {
    const fn new(
        what: &'static str,
        min: u32,
        max: u32,
        names: &'static [&'static str],
        first: u32,
    ) -> Self {
        CronField {
            what,
            min,
            max,
            names,
            first,
        }
    }
}

/// The five fields of a schedule, in order.
const CRON_FIELDS: [CronField; 5] = {
    const NONE: &[&str] = &[];
    const MONTHS: &[&str] = &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    [
        CronField::new("minute", 0, 59, NONE, 0),
        CronField::new("hour", 0, 23, NONE, 0),
        CronField::new("day of month", 1, 31, NONE, 0),
        CronField::new("month", 1, 12, MONTHS, 1),
        CronField::new("day of week", 0, 6, DAYS, 0),
    ]
};

/// One comma-separated part of a field: `*` or `?`, a number, a range,
/// each with an optional `/step`; `Err` says what is wrong with it.
fn cron_part(part: &str, field: &CronField) -> Result<(), String> {
    let CronField { what, min, max, .. } = *field;
    let number = |s: &str| cron_number(s, field);
    let (range, step) = match part.split_once('/') {
        Some((range, step)) => (range, Some(step)),
        None => (part, None),
    };
    let not_a_number = || format!("{what} {} is not a number or range", quote(part));
    let (lo, hi) = match range {
        "*" | "?" => (min, max),
        _ => match range.split_once('-') {
            Some((a, b)) => match (number(a), number(b)) {
                (Some(a), Some(b)) => (a, b),
                _ => return Err(not_a_number()),
            },
            None => match number(range) {
                // "5/15" means from 5 to the end, every 15.
                Some(a) if step.is_some() => (a, max),
                Some(a) => (a, a),
                None => return Err(not_a_number()),
            },
        },
    };
    if lo < min || hi > max {
        return Err(format!("{what} {} is outside {min}-{max}", quote(part)));
    }
    if lo > hi {
        return Err(format!("{what} {} runs backwards", quote(part)));
    }
    match step.map(number) {
        None | Some(Some(1..)) => Ok(()),
        Some(_) => Err(format!(
            "{what} {} has a step that is not a positive number",
            quote(part)
        )),
    }
}

/// A field's value: one of its names (any case) or up to four digits.
fn cron_number(s: &str, field: &CronField) -> Option<u32> {
    let lower = s.to_ascii_lowercase();
    if let Some(i) = field.names.iter().position(|n| *n == lower) {
        return Some(i as u32 + field.first);
    }
    if s.is_empty() || !s.chars().all(|c| c.is_ascii_digit()) || s.len() > 4 {
        return None;
    }
    s.parse().ok()
}

/// The number of bytes in a Kubernetes quantity such as `256Mi`, `1.5Gi`,
/// `100M` or `1048576`; `None` when it is not one.
pub fn quantity_bytes(quantity: &str) -> Option<u64> {
    const SUFFIXES: [(&str, f64); 8] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    let (number, scale) = SUFFIXES
        .iter()
        .find_map(|(suffix, scale)| quantity.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((quantity, 1.0));
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    let valid = match number.split_once('.') {
        Some((whole, fraction)) => plain(whole) && plain(fraction),
        None => plain(number),
    };
    if !valid {
        return None;
    }
    let bytes = number.parse::<f64>().ok()? * scale;
    (bytes.is_finite() && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// The amount a Kubernetes quantity stands for, in its unit (cores for
/// CPU, bytes for memory): `500m` is 0.5, `1.5Gi` is 1610612736, `1e3` is
/// 1000; `None` when it is not a quantity or is negative.
pub fn quantity(text: &str) -> Option<f64> {
    const BINARY: [(&str, f64); 6] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
    ];
    const DECIMAL: [(&str, f64); 8] = [
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
    ];
    let text = text.strip_prefix('+').unwrap_or(text);
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let number = |s: &str| -> Option<f64> {
        let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
        (!(whole.is_empty() && fraction.is_empty()) && digits(whole) && digits(fraction))
            .then(|| s.parse::<f64>().ok())
            .flatten()
    };
    let scaled = |n: &str, scale: f64| number(n).map(|n| n * scale);
    let value = if let Some((n, scale)) = BINARY
        .iter()
        .chain(&DECIMAL)
        .find_map(|(suffix, scale)| text.strip_suffix(suffix).map(|n| (n, *scale)))
    {
        scaled(n, scale)
    } else if let Some(n) = text.strip_suffix('E') {
        scaled(n, 1e18)
    } else if let Some((n, exponent)) = text.split_once(['e', 'E']) {
        let exponent = exponent.strip_prefix('+').unwrap_or(exponent);
        let (sign, magnitude) = match exponent.strip_prefix('-') {
            Some(m) => (-1, m),
            None => (1, exponent),
        };
        let power: i32 = (!magnitude.is_empty() && digits(magnitude) && magnitude.len() <= 3)
            .then(|| magnitude.parse().ok())
            .flatten()?;
        scaled(n, 10f64.powi(sign * power))
    } else {
        number(text)
    }?;
    value.is_finite().then_some(value)
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

    /// Issue 31: `timeZone: Mars/Olympus` made a CronJob the API server
    /// refuses.
    #[test]
    fn time_zones_are_iana_names() {
        for (zone, ok) in [
            ("Europe/Berlin", true),
            ("UTC", true),
            ("Etc/GMT+5", true),
            ("America/Argentina/Buenos_Aires", true),
            ("US/Pacific", true),
            ("Mars/Olympus", false),
            ("Local", false),
            ("europe/berlin", false),
            ("", false),
            (
                "# IANA time zone names (Zone and Link) from tzdata 2025b, one a line: what",
                false,
            ),
        ] {
            assert_eq!(time_zone("spec.timeZone", zone).is_ok(), ok, "{zone:?}");
        }
    }

    #[test]
    fn dns_subdomains() {
        let long = format!("{}.{}", "a".repeat(63), "b".repeat(190));
        assert!(is_dns_subdomain("backup-writer"));
        for (name, ok) in [
            ("s3-creds", true),
            ("a b", false),
            ("irsa\nx", false),
            ("", false),
        ] {
            assert_eq!(object_name("f", name, "Secret").is_ok(), ok, "{name:?}");
        }
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("Not_A_Name"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain(&long));
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
    fn cron_schedules() {
        let good = [
            "0 2 * * *",
            "*/15 * * * *",
            "0 0 1,15 * *",
            "30 3 * * MON-FRI",
            "0 0 * JAN,jul ?",
            "5/10 1-5 * * 0",
            "@daily",
            " 0 2 * * * ",
        ];
        for s in good {
            assert!(cron("spec.schedule", s).is_ok(), "{s:?} should be valid");
        }
        let bad = [
            ("", "has 0 fields"),
            ("0 2 * *", "has 4 fields"),
            ("0 0 2 * * *", "has 6 fields"),
            ("60 * * * *", "minute \"60\" is outside 0-59"),
            ("* 24 * * *", "hour \"24\" is outside 0-23"),
            ("* * 0 * *", "day of month \"0\" is outside 1-31"),
            ("* * * 13 *", "month \"13\" is outside 1-12"),
            ("* * * * 7", "day of week \"7\" is outside 0-6"),
            ("5-1 * * * *", "runs backwards"),
            ("*/0 * * * *", "not a positive number"),
            ("x * * * *", "is not a number or range"),
            ("@every 5m", "unknown macro"),
            ("TZ=UTC 0 2 * * *", "use spec.timeZone"),
        ];
        for (s, want) in bad {
            let err = cron("spec.schedule", s).unwrap_err().to_string();
            assert!(err.starts_with("spec.schedule: "), "{err}");
            assert!(err.contains(want), "{s:?}: {err}");
        }
    }

    #[test]
    fn quantities() {
        assert_eq!(quantity_bytes("256Mi"), Some(256 * 1024 * 1024));
        assert_eq!(quantity_bytes("1.5Gi"), Some(1536 * 1024 * 1024));
        assert_eq!(quantity_bytes("100M"), Some(100_000_000));
        assert_eq!(quantity_bytes("42"), Some(42));
        for bad in ["", "Mi", "1.Mi", "-1Mi", "1e3", "12Xi", "1 Mi"] {
            assert_eq!(quantity_bytes(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn any_quantity() {
        for (text, want) in [
            ("500m", 0.5),
            ("2", 2.0),
            ("1.5Gi", 1610612736.0),
            ("+1k", 1000.0),
            ("1e3", 1000.0),
            ("1E", 1e18),
            (".5", 0.5),
            ("64Mi", 67108864.0),
        ] {
            assert_eq!(quantity(text), Some(want), "{text}");
        }
        for bad in ["", "m", "-1", "1GB", "1 Gi", "1e", "1.2.3", "lots", "1ei"] {
            assert_eq!(quantity(bad), None, "{bad:?}");
        }
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
