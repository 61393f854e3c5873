//! PostgreSQL's own settings from `spec.postgresql`: which parameters a
//! user may set and which the operator owns, how they reach the server
//! (`-c name=value` on its command line, read back from the StatefulSet's
//! template here too), which of them a standby needs at least as high as
//! the primary's, and the pg_hba.conf the instances read when
//! `spec.postgresql.pgHba` adds lines. At the bottom of the Database's
//! stack beside `spec`: it imports nothing of the Database.

use std::collections::BTreeMap;

use crate::hook::quote::{cut, key_path};
use crate::operators::expansion::{as_seen, literal};
use crate::operators::validate::{InvalidSpec, quote};

/// The most parameters `spec.postgresql.parameters` may hold.
pub(super) const MAX_PARAMETERS: usize = 64;
/// The longest parameter value.
pub(super) const MAX_VALUE: usize = 1024;
/// The most lines `spec.postgresql.pgHba` may hold.
pub(super) const MAX_HBA_LINES: usize = 64;
/// The longest pg_hba.conf line.
pub(super) const MAX_HBA_LINE: usize = 512;

/// The parameters the operator sets or relies on, each with why a user
/// may not set it. Passed on the command line, a user's value would also
/// override what the operator writes with ALTER SYSTEM.
const OWNED: &[(&str, &str)] = &[
    (
        "listen_addresses",
        "the Services, probes and Jobs reach every instance on all its addresses",
    ),
    (
        "port",
        "the Services, probes and Jobs reach every instance on port 5432",
    ),
    ("data_directory", "the operator places the data directory"),
    ("config_file", "the operator places the configuration files"),
    (
        "hba_file",
        "the operator writes pg_hba.conf; add lines with spec.postgresql.pgHba",
    ),
    ("ident_file", "the operator places the configuration files"),
    (
        "external_pid_file",
        "the operator places the server's files",
    ),
    (
        "unix_socket_directories",
        "the image's entrypoint and the upgrade Job initialize the database over the local socket",
    ),
    (
        "unix_socket_group",
        "the image's entrypoint and the upgrade Job initialize the database over the local socket",
    ),
    (
        "unix_socket_permissions",
        "the image's entrypoint and the upgrade Job initialize the database over the local socket",
    ),
    (
        "hot_standby",
        "standbys serve reads, and their probes query them",
    ),
    (
        "wal_log_hints",
        "a former primary rejoins with pg_rewind, which needs it on",
    ),
    (
        "wal_keep_size",
        "the operator keeps a tenth of spec.storage.size of WAL for the standbys to catch up",
    ),
    (
        "synchronous_standby_names",
        "it follows spec.replication (synchronous: any one of the instances, by name)",
    ),
    (
        "primary_conninfo",
        "each standby streams from the read-write Service, written when it starts",
    ),
    (
        "primary_slot_name",
        "standbys stream without replication slots, which would fill the primary's volume when one is gone",
    ),
    (
        "promote_trigger_file",
        "only the operator's promote Job promotes a standby",
    ),
    (
        "recovery_min_apply_delay",
        "a switchover waits for the candidate to replay the old primary's WAL",
    ),
    (
        "restore_command",
        "standbys stream from the primary, and fetch from the operator's WAL archive when spec.backup.archive is set",
    ),
    (
        "archive_cleanup_command",
        "standbys stream from the primary; the WAL archive is the operator's (spec.backup.archive)",
    ),
    (
        "recovery_end_command",
        "standbys stream from the primary; the WAL archive is the operator's (spec.backup.archive)",
    ),
    (
        "default_transaction_read_only",
        "a switchover stops the old primary's writes with it (ALTER SYSTEM), which a value given here would override",
    ),
    (
        "ssl",
        "every instance serves TLS; choose its certificate with spec.tls",
    ),
    (
        "ssl_passphrase_command",
        "the instances' keys have no passphrase; choose the certificate with spec.tls",
    ),
    (
        "password_encryption",
        "the replication and application users' passwords are stored as SCRAM, which the operator's pg_hba.conf rules require (md5 would lock the standbys and the application out)",
    ),
    (
        "full_page_writes",
        "a former primary rejoins with pg_rewind, and a crash must not leave torn pages",
    ),
    (
        "logging_collector",
        "the server logs to the container's output, where kubectl logs reads it",
    ),
];

/// Prefixes of families of parameters the operator owns, each with why.
const OWNED_PREFIXES: &[(&str, &str)] = &[
    (
        "archive_",
        "the WAL archive is the operator's: turn it on with spec.backup.archive (its archive_command hands each segment to the archiver sidecar)",
    ),
    (
        "recovery_target",
        "instances recover to the end of the primary's WAL; a Database restores from a dump with spec.bootstrap",
    ),
];

/// The parameters a hot standby needs at least as high as the primary's,
/// with PostgreSQL's default (the same in 14 to 18): a standby with a lower
/// value stops replaying.
pub(super) const STANDBY_AT_LEAST: [(&str, u64); 5] = [
    ("max_connections", 100),
    ("max_locks_per_transaction", 64),
    ("max_prepared_transactions", 0),
    ("max_wal_senders", 10),
    ("max_worker_processes", 8),
];

/// The CRD's rule refusing the parameters the operator owns, so that
/// `kubectl apply` says so at once (the hook's 422 also says why).
pub(super) fn owned_rule() -> kube::core::Rule {
    let names: Vec<String> = OWNED.iter().map(|(n, _)| format!("'{n}'")).collect();
    let prefixes: Vec<String> = OWNED_PREFIXES
        .iter()
        .map(|(p, _)| format!("k.startsWith('{p}')"))
        .collect();
    let rule = format!(
        "!has(self.parameters) || self.parameters.all(k, !(k in [{}]) && !({}) && !(k.startsWith('ssl_') && k.endsWith('_file')) && k != 'ssl_crl_dir')",
        names.join(", "),
        prefixes.join(" || ")
    );
    let listed: Vec<&str> = OWNED.iter().map(|(n, _)| *n).collect();
    kube::core::Rule::new(rule).message(kube::core::Message::Message(format!(
        "spec.postgresql.parameters names a parameter the operator sets or relies on; remove it. Refused: {}, archive_*, recovery_target*, ssl_*_file, ssl_crl_dir",
        listed.join(", ")
    )))
}

/// Why `name` belongs to the operator, if it does.
pub(super) fn owned(name: &str) -> Option<&'static str> {
    OWNED
        .iter()
        .find(|(owned, _)| *owned == name)
        .map(|(_, why)| *why)
        .or_else(|| {
            if (name.starts_with("ssl_") && name.ends_with("_file")) || name == "ssl_crl_dir" {
                return Some("the operator places the certificate; choose it with spec.tls");
            }
            OWNED_PREFIXES
                .iter()
                .find(|(prefix, _)| name.starts_with(prefix))
                .map(|(_, why)| *why)
        })
}

/// Checks `spec.postgresql.parameters` for a Database of `instances`
/// instances, `synchronous` or not: names shaped as PostgreSQL's (lower
/// case, an extension's prefix allowed), none the operator owns, values
/// that fit on a command line, the few values the operator's replication
/// depends on, and none that voids a promise the operator makes.
pub(super) fn validate(
    parameters: &BTreeMap<String, String>,
    instances: i32,
    synchronous: bool,
) -> Result<(), InvalidSpec> {
    if parameters.len() > MAX_PARAMETERS {
        return Err(InvalidSpec::new(
            "spec.postgresql.parameters",
            format!(
                "holds {} parameters, at most {MAX_PARAMETERS}",
                parameters.len()
            ),
        ));
    }
    for (name, value) in parameters {
        let field = key_path("spec.postgresql.parameters", name);
        if !is_parameter_name(name) {
            return Err(InvalidSpec::new(
                field,
                format!(
                    "{} is not a PostgreSQL parameter's name: write it in lower case, like work_mem or pg_stat_statements.max",
                    quote(name)
                ),
            ));
        }
        if let Some(why) = owned(name) {
            return Err(InvalidSpec::new(
                field,
                format!("is set by the operator and cannot be changed: {why}; remove it"),
            ));
        }
        if value.len() > MAX_VALUE {
            return Err(InvalidSpec::new(
                field,
                format!(
                    "is {} bytes long, at most {MAX_VALUE}; shorten it",
                    value.len()
                ),
            ));
        }
        if value.chars().any(char::is_control) {
            return Err(InvalidSpec::new(
                field,
                "holds a line break, tab or other control character; write the value on one line of printable characters",
            ));
        }
        validate_value(name, value, &field, instances)?;
        keeps_promises(name, value, &field, synchronous)?;
    }
    Ok(())
}

/// The oldest TLS version the instances accept when
/// `ssl_min_protocol_version` is not given (PostgreSQL's own default).
pub(super) const SSL_MIN_PROTOCOL: &str = "TLSv1.2";

/// `wal_sender_timeout` and `wal_receiver_timeout` when the spec names
/// none (PostgreSQL's own are 60 s; CloudNativePG's are 5 s). A standby
/// streaming from a primary that hangs (paused, its node partitioned)
/// notices only once this passes without a message: with a minute, every
/// synchronous commit on the new primary waited for the other standby to
/// give up on the old one, about a minute after the hang (the real loop's
/// `dbrealrto`: 57 s from the pause to the first commit, the promotion
/// done at 32 s). Each side asks the other for a message after half of it
/// is silent, so a busy or idle link never reaches it.
pub(super) const REPLICATION_TIMEOUT: &str = "5s";

/// What `synchronous_commit` is under synchronous replication when the
/// spec names none: a commit returns once a standby has flushed it.
pub(super) const SYNCHRONOUS_COMMIT: &str = "on";

/// Values that would void what the docs promise: `fsync` off loses
/// or corrupts data on a crash, whatever the replication; under
/// synchronous replication, a `synchronous_commit` that does not wait for
/// a standby's flush (off, local, remote_write) acknowledges commits a
/// failover loses. (`full_page_writes` is owned outright.)
fn keeps_promises(
    name: &str,
    value: &str,
    field: &str,
    synchronous: bool,
) -> Result<(), InvalidSpec> {
    let refuse = |why: &str| {
        Err(InvalidSpec::new(
            field,
            format!("{} {why}; remove it", quote(value)),
        ))
    };
    match name {
        "fsync" if !is_on(value) => refuse(
            "would let a crash lose or corrupt acknowledged commits, on the primary and every standby",
        ),
        "synchronous_commit"
            if synchronous && !(is_on(value) || value.eq_ignore_ascii_case("remote_apply")) =>
        {
            refuse(
                "acknowledges a commit before a standby has it, which spec.replication synchronous promises; the operator sets on (remote_apply is also kept)",
            )
        }
        "ssl_min_protocol_version"
            if !["tlsv1.2", "tlsv1.3"].contains(&value.to_ascii_lowercase().as_str()) =>
        {
            refuse("is not TLSv1.2 or TLSv1.3; older versions are broken and refused")
        }
        _ => Ok(()),
    }
}

/// Whether PostgreSQL reads `value` as a boolean on: on, true, yes, 1, or
/// an unambiguous prefix of true or yes, in any case.
fn is_on(value: &str) -> bool {
    let v = value.trim().to_ascii_lowercase();
    !v.is_empty() && (v == "on" || v == "1" || "true".starts_with(&v) || "yes".starts_with(&v))
}

/// The values the operator's replication depends on.
fn validate_value(name: &str, value: &str, field: &str, instances: i32) -> Result<(), InvalidSpec> {
    if name == "wal_level" && !matches!(value, "replica" | "logical") {
        return Err(InvalidSpec::new(
            field,
            format!(
                "{} leaves the standbys nothing to stream; write replica or logical",
                quote(value)
            ),
        ));
    }
    if STANDBY_AT_LEAST.iter().any(|(n, _)| *n == name) {
        let Some(number) = integer(value) else {
            return Err(InvalidSpec::new(
                field,
                format!("{} is not a whole number; write it like 200", quote(value)),
            ));
        };
        let least = u64::try_from(instances).unwrap_or(1) + 1;
        if name == "max_wal_senders" && number < least {
            return Err(InvalidSpec::new(
                field,
                format!(
                    "{number} is too few for {instances} instances: each standby streams with one sender and a standby cloning uses two; write at least {least}"
                ),
            ));
        }
    }
    Ok(())
}

/// A PostgreSQL parameter's name as written in postgresql.conf: lower
/// case letters, digits and `_`, not starting with a digit, with at most
/// one `.` after an extension's prefix; at most 63 bytes.
fn is_parameter_name(name: &str) -> bool {
    let part = |p: &str| {
        p.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    name.len() <= 63
        && match name.split_once('.') {
            Some((prefix, rest)) => part(prefix) && part(rest),
            None => part(name),
        }
}

/// A value written as a plain whole number.
pub(super) fn integer(value: &str) -> Option<u64> {
    (!value.is_empty() && value.len() <= 10 && value.chars().all(|c| c.is_ascii_digit()))
        .then(|| value.parse().ok())
        .flatten()
}

/// The server's command-line arguments for `parameters`: `-c name=value`,
/// one argument each, in name order, each [`literal`] so the server reads
/// the value as written (`$(POSTGRES_PASSWORD)` is no password).
pub(super) fn args(parameters: &BTreeMap<String, String>) -> Vec<String> {
    parameters
        .iter()
        .flat_map(|(name, value)| ["-c".to_string(), format!("{name}={value}")])
        .map(|arg| literal(&arg).into_owned())
        .collect()
}

/// Every `-c name=value` of a command, read back as the server reads it:
/// what [`args`] and the operator's own arguments wrote.
pub(super) fn of_command(command: &[String]) -> BTreeMap<String, String> {
    command
        .windows(2)
        .filter(|pair| pair[0] == "-c")
        .filter_map(|pair| {
            let (name, value) = pair[1].split_once('=')?;
            Some((as_seen(name).into_owned(), as_seen(value).into_owned()))
        })
        .collect()
}

/// A parameter kept at what the instances run instead of what the spec
/// asks: a decrease a standby could not replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The parameter.
    pub name: String,
    /// What the spec asks (PostgreSQL's default when it names none).
    pub wanted: u64,
    /// What the instances run and keep.
    pub running: u64,
}

/// The parameters to run: those wanted, but none of [`STANDBY_AT_LEAST`]
/// below what `running` (the StatefulSet's template) has, and the ones
/// held so. The rollout updates standbys first: a standby restarted with a
/// lower value than its primary's stops replaying and blocks the rollout.
pub(super) fn hold_decreases(
    wanted: &BTreeMap<String, String>,
    running: &BTreeMap<String, String>,
) -> (BTreeMap<String, String>, Vec<Held>) {
    let mut out = wanted.clone();
    let mut held = Vec::new();
    for (name, default) in STANDBY_AT_LEAST {
        let value = |map: &BTreeMap<String, String>| match map.get(name) {
            Some(v) => integer(v),
            None => Some(default),
        };
        let (Some(want), Some(run)) = (value(wanted), value(running)) else {
            continue;
        };
        if want < run {
            match running.get(name) {
                Some(v) => out.insert(name.to_string(), v.clone()),
                None => out.remove(name),
            };
            held.push(Held {
                name: name.to_string(),
                wanted: want,
                running: run,
            });
        }
    }
    (out, held)
}

/// The operator's own pg_hba.conf rules, first: the local socket (the
/// image's entrypoint and the operator's scripts); over TCP, no connection
/// without TLS; the replicator's streaming and cloning, the superuser the
/// probes and Jobs connect as.
const HBA_FIRST: &str = "\
local all all trust
local replication all trust
hostnossl all all all reject
hostnossl replication all all reject
hostssl replication replicator all scram-sha-256
hostssl all postgres all scram-sha-256
";

/// The rule after the user's lines: any user by password, over TLS.
const HBA_LAST: &str = "hostssl all all all scram-sha-256\n";

/// The rules of templates from before TLS, kept for their instances until
/// none can start any more: as [`HBA_FIRST`] and [`HBA_LAST`], without TLS.
const HBA_FIRST_WITHOUT_TLS: &str = "\
local all all trust
local replication all trust
host replication replicator all scram-sha-256
host all postgres all scram-sha-256
";
const HBA_LAST_WITHOUT_TLS: &str = "host all all all scram-sha-256\n";

/// The pg_hba.conf of instances given `lines`: the operator's rules,
/// the lines, then the last rule.
pub(super) fn hba_conf(lines: &[String], monitor: Option<&str>) -> String {
    let first = match monitor {
        // Before the user's lines, which may reject what they do not name.
        Some(role) => format!(
            "{HBA_FIRST}# The exporter (spec.monitoring), over the pod's loopback only.\nhostssl all {role} 127.0.0.1/32 scram-sha-256\nhost all {role} all reject\n"
        ),
        None => HBA_FIRST.to_string(),
    };
    hba_conf_of(
        &first,
        lines,
        "# Everyone else, by password, over TLS.\n",
        HBA_LAST,
    )
}

/// The pg_hba.conf of instances from before TLS given `lines`.
pub(super) fn hba_conf_without_tls(lines: &[String]) -> String {
    hba_conf_of(
        HBA_FIRST_WITHOUT_TLS,
        lines,
        "# Everyone else, by password.\n",
        HBA_LAST_WITHOUT_TLS,
    )
}

fn hba_conf_of(first: &str, lines: &[String], last_comment: &str, last: &str) -> String {
    let mut conf = format!(
        "# Written by opshooks.\n# The operator's rules.\n{first}# spec.postgresql.pgHba.\n"
    );
    for line in lines {
        conf.push_str(line.trim());
        conf.push('\n');
    }
    conf.push_str(last_comment);
    conf.push_str(last);
    conf
}

/// The connection types a pg_hba.conf line starts with.
const HBA_TYPES: [&str; 6] = [
    "local",
    "host",
    "hostssl",
    "hostnossl",
    "hostgssenc",
    "hostnogssenc",
];

/// Checks `spec.postgresql.pgHba`: each line one rule, starting with a
/// connection type, no include directives.
pub(super) fn validate_hba(lines: &[String]) -> Result<(), InvalidSpec> {
    if lines.len() > MAX_HBA_LINES {
        return Err(InvalidSpec::new(
            "spec.postgresql.pgHba",
            format!("holds {} lines, at most {MAX_HBA_LINES}", lines.len()),
        ));
    }
    for (i, line) in lines.iter().enumerate() {
        let field = format!("spec.postgresql.pgHba[{i}]");
        if line.len() > MAX_HBA_LINE {
            return Err(InvalidSpec::new(
                field,
                format!("is {} bytes long, at most {MAX_HBA_LINE}", line.len()),
            ));
        }
        if line.chars().any(|c| c != '\t' && c.is_control()) {
            return Err(InvalidSpec::new(
                field,
                "holds a line break or a control character; write one rule per entry",
            ));
        }
        let first = line.split_whitespace().next().unwrap_or_default();
        if !HBA_TYPES.contains(&first) {
            return Err(InvalidSpec::new(
                field,
                format!(
                    "{} does not start with a connection type; write a rule like \"host all all 10.0.0.0/8 scram-sha-256\" (local, host, hostssl, hostnossl, hostgssenc or hostnogssenc)",
                    quote(line)
                ),
            ));
        }
        // A rule that can never match would look like a requirement (or a
        // permission) while the catch-all after it decides.
        let never = match first {
            "hostgssenc" => Some((
                "the instances have no Kerberos keytab for GSSAPI encryption",
                "host (or hostssl)",
            )),
            "hostnossl"
                if !line
                    .split_whitespace()
                    .take_while(|f| !f.starts_with('#'))
                    .any(|f| f == "reject") =>
            {
                Some((
                    "the operator refuses every connection without TLS before it",
                    "hostssl (or host)",
                ))
            }
            _ => None,
        };
        if let Some((why, fix)) = never {
            return Err(InvalidSpec::new(
                field,
                format!("{} can never match: {why}; write {fix}", quote(line)),
            ));
        }
        hba_rule(first, line)
            .map_err(|why| InvalidSpec::new(field, format!("{}: {why}", quote(line))))?;
    }
    Ok(())
}

/// The authentication methods a rule may name: those that need no file,
/// server or setting the instances do not have. Any other would make the
/// whole pg_hba.conf fail to load, and an instance that restarts then
/// would not start.
const HBA_METHODS: [&str; 5] = ["scram-sha-256", "md5", "password", "trust", "reject"];

/// Checks one rule of connection type `kind` as PostgreSQL reads it: its
/// fields (databases, users, an address but for local, a method) and that
/// the address and the method are ones the server loads.
fn hba_rule(kind: &str, line: &str) -> Result<(), String> {
    if line.trim_end().ends_with('\\') {
        return Err(
            "ends with \\, which continues a rule on the next line; write the rule whole"
                .to_string(),
        );
    }
    let fields: Vec<&str> = line
        .split_whitespace()
        .take_while(|f| !f.starts_with('#'))
        .collect();
    let whole =
        "is not a whole rule: a type, databases, users, an address (but for local) and a method";
    let method_at = match kind {
        "local" => 3,
        _ => {
            let address = fields.get(3).ok_or(whole)?;
            match address.parse::<std::net::IpAddr>() {
                // An address alone: the mask is the next field.
                Ok(_) => {
                    let mask = fields.get(4).ok_or(whole)?;
                    mask.parse::<std::net::IpAddr>()
                        .map_err(|_| format!("{} needs a mask after it (255.255.255.0), or write it as a CIDR range (10.0.0.0/8)", cut(address)))?;
                    5
                }
                Err(_) => {
                    hba_address(address)?;
                    4
                }
            }
        }
    };
    let method = fields.get(method_at).ok_or(whole)?;
    let local_only = kind == "local" && *method == "peer";
    if !HBA_METHODS.contains(method) && !local_only {
        return Err(format!(
            "the method {} is not one the instances can use; write scram-sha-256, md5, password, trust or reject (or peer for local)",
            cut(method)
        ));
    }
    Ok(())
}

/// A rule's address: `all`, `samehost`, `samenet`, a CIDR range, or a
/// host name (`.example.com` for a domain).
fn hba_address(address: &str) -> Result<(), String> {
    if matches!(address, "all" | "samehost" | "samenet") {
        return Ok(());
    }
    if let Some((ip, bits)) = address.split_once('/') {
        let max = match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(_)) => 32,
            Ok(std::net::IpAddr::V6(_)) => 128,
            Err(_) => {
                return Err(format!(
                    "{} in {} is not an IP address",
                    cut(ip),
                    cut(address)
                ));
            }
        };
        return match bits.parse::<u8>() {
            Ok(b) if b <= max => Ok(()),
            _ => Err(format!(
                "/{} in {} is not a prefix length from 0 to {max}",
                cut(bits),
                cut(address)
            )),
        };
    }
    let host = address.strip_prefix('.').unwrap_or(address);
    let label = |l: &str| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    match !host.is_empty() && host.split('.').all(label) {
        true => Ok(()),
        false => Err(format!(
            "{} is not an address: write all, samehost, samenet, a CIDR range (10.0.0.0/8) or a host name",
            cut(address)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_users_parameters_pass() {
        let ok = params(&[
            ("work_mem", "64MB"),
            (
                "shared_preload_libraries",
                "pg_stat_statements,auto_explain",
            ),
            ("pg_stat_statements.max", "10000"),
            ("max_connections", "300"),
            ("wal_level", "logical"),
            ("search_path", "\"$user\", public"),
            ("ssl_min_protocol_version", "TLSv1.3"),
        ]);
        assert_eq!(validate(&ok, 3, false), Ok(()));
        // Under synchronous replication, values that keep waiting for a
        // standby; asynchronous, any value.
        for value in ["on", "remote_apply", "TRUE", "yes", "1"] {
            let p = params(&[("synchronous_commit", value), ("fsync", "on")]);
            assert_eq!(validate(&p, 3, true), Ok(()), "{value}");
        }
        let off = params(&[("synchronous_commit", "off")]);
        assert_eq!(validate(&off, 3, false), Ok(()));
    }

    #[test]
    fn each_refusal_names_the_parameter_and_the_fix() {
        for (name, value, words) in [
            (
                "listen_addresses",
                "*",
                "is set by the operator and cannot be changed: the Services",
            ),
            ("port", "5433", "port 5432"),
            (
                "archive_command",
                "cp %p /x",
                "turn it on with spec.backup.archive",
            ),
            ("recovery_target_time", "2026-01-01", "spec.bootstrap"),
            ("ssl_cert_file", "/x.pem", "spec.tls"),
            ("ssl", "off", "spec.tls"),
            (
                "ssl_min_protocol_version",
                "TLSv1.1",
                "not TLSv1.2 or TLSv1.3",
            ),
            ("synchronous_standby_names", "*", "spec.replication"),
            ("default_transaction_read_only", "on", "switchover"),
            ("Work_Mem", "1MB", "not a PostgreSQL parameter's name"),
            ("work mem", "1MB", "not a PostgreSQL parameter's name"),
            ("a.b.c", "1", "not a PostgreSQL parameter's name"),
            ("work_mem", "1MB\nport=1", "line break"),
            ("work_mem", "1MB\0", "control character"),
            ("work_mem", "1MB\t", "control character"),
            ("password_encryption", "md5", "stored as SCRAM"),
            ("full_page_writes", "off", "pg_rewind"),
            ("wal_level", "minimal", "write replica or logical"),
            ("max_connections", "1e3", "not a whole number"),
            ("max_wal_senders", "3", "too few for 3 instances"),
            // Issue 31 item 8: each was answered ParametersApplied=True.
            ("fsync", "off", "crash lose or corrupt"),
            ("fsync", "false", "crash lose or corrupt"),
            ("fsync", "0", "crash lose or corrupt"),
            ("synchronous_commit", "off", "spec.replication synchronous"),
            (
                "synchronous_commit",
                "local",
                "spec.replication synchronous",
            ),
            (
                "synchronous_commit",
                "remote_write",
                "spec.replication synchronous",
            ),
            ("synchronous_commit", "No", "spec.replication synchronous"),
        ] {
            let e = validate(&params(&[(name, value)]), 3, true).unwrap_err();
            assert_eq!(e.field, format!("spec.postgresql.parameters.{name}"));
            assert!(e.message.contains(words), "{name}: {}", e.message);
        }
        let long = "x".repeat(MAX_VALUE + 1);
        assert!(validate(&params(&[("work_mem", &long)]), 1, false).is_err());
        let many: BTreeMap<String, String> = (0..=MAX_PARAMETERS)
            .map(|i| (format!("x.p{i}"), "1".to_string()))
            .collect();
        assert_eq!(
            validate(&many, 1, false).unwrap_err().field,
            "spec.postgresql.parameters"
        );
    }

    #[test]
    fn arguments_read_back_as_written() {
        let p = params(&[("work_mem", "64MB"), ("search_path", "a, b")]);
        let mut command = vec!["postgres".to_string()];
        command.extend(args(&p));
        assert_eq!(
            command[1..],
            ["-c", "search_path=a, b", "-c", "work_mem=64MB"]
        );
        assert_eq!(of_command(&command), p);
    }

    #[test]
    fn decreases_of_what_a_standby_needs_are_held() {
        let running = params(&[("max_connections", "300"), ("work_mem", "4MB")]);
        // Lower max_connections, and max_worker_processes below the default.
        let wanted = params(&[
            ("max_connections", "200"),
            ("max_worker_processes", "4"),
            ("work_mem", "1MB"),
        ]);
        let (out, held) = hold_decreases(&wanted, &running);
        assert_eq!(
            out,
            params(&[("max_connections", "300"), ("work_mem", "1MB")])
        );
        assert_eq!(
            held.iter()
                .map(|h| (h.name.as_str(), h.wanted, h.running))
                .collect::<Vec<_>>(),
            [
                ("max_connections", 200, 300),
                ("max_worker_processes", 4, 8)
            ]
        );
        // Raising is never held; neither is going back to the default
        // from below.
        let (out, held) = hold_decreases(&params(&[("max_connections", "500")]), &running);
        assert_eq!((out, held), (params(&[("max_connections", "500")]), vec![]));
    }

    #[test]
    fn hba_lines_are_checked() {
        let ok = [
            "host all all 10.0.0.0/8 scram-sha-256".to_string(),
            "hostnossl all all 10.1.0.0/16 reject".to_string(),
            "local\tall\tall\tpeer".to_string(),
            "host sameuser all 192.168.0.0/16 md5".to_string(),
            "host all all 192.168.1.0 255.255.255.0 reject # a comment".to_string(),
            "host all all .example.com scram-sha-256".to_string(),
            "host all all fd00::/8 scram-sha-256".to_string(),
            "host all all samenet trust".to_string(),
            "hostssl all all 10.0.0.0/8 scram-sha-256".to_string(),
        ];
        assert_eq!(validate_hba(&ok), Ok(()));
        for (line, words) in [
            (
                "include other.conf",
                "does not start with a connection type",
            ),
            ("host all all", "not a whole rule"),
            (
                "host all all 0.0.0.0/0 trust\nlocal all all trust",
                "line break",
            ),
            ("", "does not start with a connection type"),
            (
                "hostnossl all all 0.0.0.0/0 scram-sha-256",
                "can never match: the operator refuses every connection without TLS",
            ),
            (
                "hostgssenc all all 0.0.0.0/0 scram-sha-256",
                "can never match: the instances have no Kerberos keytab",
            ),
            // Lines PostgreSQL refuses to load: one would stop every
            // instance that restarts.
            ("host all all scram-sha-256", "is not a whole rule"),
            ("host all all 10.0.0.0/33 md5", "/33 in 10.0.0.0/33"),
            ("host all all 999.0.0.0/8 md5", "999.0.0.0 in 999.0.0.0/8"),
            ("host all all 10.0.0.1 md5", "needs a mask after it"),
            ("host all all 10.0.0.0/8 peer", "the method peer"),
            ("host all all 10.0.0.0/8 ldap", "the method ldap"),
            ("local all all krb5", "the method krb5"),
            (
                "host all all under_score md5",
                "under_score is not an address",
            ),
            ("host all all 10.0.0.0/8 md5 \\", "continues a rule"),
        ] {
            let e = validate_hba(&[line.to_string()]).unwrap_err();
            assert_eq!(e.field, "spec.postgresql.pgHba[0]");
            assert!(e.message.contains(words), "{line:?}: {}", e.message);
        }
    }

    #[test]
    fn the_operators_rules_come_first_and_the_catch_all_last() {
        let conf = hba_conf(&["host all all 10.0.0.0/8 md5".to_string()], None);
        let rules: Vec<&str> = conf.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(rules[2], "hostnossl all all all reject");
        assert_eq!(rules[3], "hostnossl replication all all reject");
        assert_eq!(rules[4], "hostssl replication replicator all scram-sha-256");
        assert_eq!(rules[6], "host all all 10.0.0.0/8 md5");
        assert_eq!(rules.last(), Some(&"hostssl all all all scram-sha-256"));
        // The exporter's role logs in from its own pod only, whatever the
        // user's lines and the catch-all admit.
        let monitored = hba_conf(
            &["host all all 0.0.0.0/0 scram-sha-256".to_string()],
            Some("opshooks_monitor"),
        );
        let rules: Vec<&str> = monitored.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            rules[6..9],
            [
                "hostssl all opshooks_monitor 127.0.0.1/32 scram-sha-256",
                "host all opshooks_monitor all reject",
                "host all all 0.0.0.0/0 scram-sha-256",
            ]
        );
    }
}
