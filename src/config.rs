//! Command-line flags and subcommands. Every flag can also be set from the
//! environment (`OPSHOOKS_*`), so the Helm chart configures the server
//! without a config file; with no arguments at all, opshooks serves every
//! operator on 127.0.0.1:8080.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::http::reload::Refresh;
use crate::http::tls::{self, TlsFiles};
use crate::http::{DEFAULT_MIN_BODY_RATE, Limits, ServeOptions, auth};

/// opshooks: Kubernetes operators as pure Metacontroller hooks.
#[derive(Debug, Parser)]
#[command(name = "opshooks", version, about)]
pub struct Config {
    /// What to do; serves the hooks when omitted.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Server settings, used when serving.
    #[command(flatten)]
    pub server: ServerArgs,
    /// Logging settings.
    #[command(flatten)]
    pub log: LogArgs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve every operator's hooks over HTTP (the default). The server
    /// flags go before `serve` or after it, not both.
    Serve(Box<ServeArgs>),
    /// Answer one hook request from FILE (or stdin) and print exactly the
    /// body the server would send.
    Hook(HookArgs),
    /// Print the OpenAPI document (openapi.yaml).
    Openapi,
    /// Print the CRDs and CompositeControllers, or write them to a folder.
    Manifests(ManifestArgs),
    /// Print the children and status an operator answers for a parent as
    /// you would write it for kubectl, with the objects it observes: no
    /// hook request to write by hand.
    Render(RenderArgs),
    /// Run an operator through its life offline, with Metacontroller's
    /// semantics and a model of the Kubernetes controllers, and print one
    /// line per step.
    Simulate(SimulateArgs),
    /// Read what a script of ours left in a pod's termination message, as
    /// the hook reads it, and print it as JSON: for a look at a pod, and
    /// for the scripts' tests, which check every line they saw a script
    /// write.
    Report(ReportArgs),
}

/// `opshooks report [FILE]`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The termination message; stdin when omitted or `-`.
    pub file: Option<PathBuf>,
}

/// Flags of `opshooks hook`.
#[derive(Debug, Args)]
pub struct HookArgs {
    /// The operator, as in its route: `webserver`.
    pub operator: String,
    /// The hook: sync, finalize or customize.
    pub hook: String,
    /// The request body; stdin when omitted or `-`.
    pub file: Option<PathBuf>,
    /// The current time the operator sees (RFC 3339), for reproducible
    /// answers; the wall clock when omitted.
    #[arg(long, env = "OPSHOOKS_NOW")]
    pub now: Option<String>,
    /// A whole number fixing the random bytes the operator sees, for
    /// reproducible answers where a secret is generated: the bytes
    /// `simulate --seed N` gives its first call. Fresh randomness when
    /// omitted.
    #[arg(long, env = "OPSHOOKS_SEED")]
    pub seed: Option<u64>,
}

/// `--base-url`: an absolute http or https URL with a host, and no query
/// or fragment, since each hook's path is appended to it.
fn base_url(text: &str) -> Result<String, String> {
    let fix = "use an absolute URL such as http://opshooks.opshooks.svc or https://hooks.example:8443/prefix";
    let uri: axum::http::Uri = text.parse().map_err(|_| format!("not a URL; {fix}"))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(host)) if !host.is_empty() => {}
        _ => return Err(format!("needs http:// or https:// and a host; {fix}")),
    }
    if uri.query().is_some() || text.contains('#') {
        return Err(format!(
            "a query or fragment would end up before each hook's path; {fix}"
        ));
    }
    Ok(text.to_string())
}

/// Flags of `opshooks manifests`.
#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// Base URL at which Metacontroller reaches opshooks.
    #[arg(long, env = "OPSHOOKS_BASE_URL", default_value = crate::manifests::DEFAULT_BASE_URL, value_parser = base_url)]
    pub base_url: String,
    /// Metacontroller hook version.
    #[arg(long, default_value = "v2", value_parser = ["v1", "v2"])]
    pub hook_version: String,
    /// Hook timeout, as a Go duration.
    #[arg(long, default_value = "10s")]
    pub hook_timeout: String,
    /// Write one file per object into this folder instead of printing.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also write the Helm chart's generated files (crds/, the controller
    /// templates, the RBAC resource list) into this chart folder.
    #[arg(long)]
    pub chart: Option<PathBuf>,
}

/// Flags of `opshooks serve`: the server's, as they may also be given
/// before the subcommand.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Server settings.
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `opshooks render OPERATOR PARENT [--observed FILE]...`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The operator: webserver, memcached, backup or database.
    pub operator: String,
    /// The parent, as YAML or JSON (for example examples/database.yaml).
    pub file: PathBuf,
    /// Objects that exist (YAML or JSON; a file may hold several YAML
    /// documents or a kubectl List): those of the operator's child types
    /// are the parent's children, the rest (pods, volumes, targets) what
    /// it relates to.
    #[arg(long = "observed", value_name = "FILE")]
    pub observed: Vec<PathBuf>,
    /// The current time the operator sees (RFC 3339); the wall clock when
    /// omitted.
    #[arg(long, env = "OPSHOOKS_NOW")]
    pub now: Option<String>,
    /// A whole number fixing the random bytes the operator sees, as for
    /// `hook`; fresh randomness when omitted.
    #[arg(long, env = "OPSHOOKS_SEED")]
    pub seed: Option<u64>,
    /// `yaml`: the parent with its new status, then each child, as YAML
    /// documents (for `kubectl apply -f -`); `json`: the same as a kubectl
    /// List.
    #[arg(long, short = 'o', default_value = "yaml", value_parser = ["yaml", "json"])]
    pub output: String,
}

/// `opshooks simulate OPERATOR FILE [--then EVENT]...`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The operator: webserver, memcached, backup or database.
    pub operator: String,
    /// The parent, as YAML or JSON (for example examples/database.yaml).
    pub file: PathBuf,
    /// An event to apply once the loop has settled, in order: spec.PATH=VALUE,
    /// delete, delete KIND/NAME, annotate KIND/NAME KEY=VALUE,
    /// unannotate KIND/NAME KEY, hook-down N, fail-job NAME (NAME* for
    /// every Job whose name starts so), heal-job NAME, not-ready POD,
    /// ready POD, kill-primary (the pod the role ConfigMap names stays not
    /// ready until ready POD), lose-volume POD, run-cronjob NAME,
    /// restart-metacontroller N.
    #[arg(long = "then", value_name = "EVENT")]
    pub then: Vec<String>,
    /// Objects that exist before the parent (YAML or JSON, one per file),
    /// such as the StatefulSet a Backup targets.
    #[arg(long = "with", value_name = "FILE")]
    pub with: Vec<PathBuf>,
    /// Jobs whose runs fail from the start (NAME* for every Job whose
    /// name starts so).
    #[arg(long = "fail-job", value_name = "NAME")]
    pub fail_job: Vec<String>,
    /// The most steps to wait for the loop to settle after each event.
    #[arg(long, default_value_t = 200)]
    pub max_steps: u32,
    /// The time of the first step (RFC 3339); each step adds 10 s.
    #[arg(long, default_value = "2026-01-01T00:00:00Z")]
    pub start: String,
    /// A whole number fixing the random bytes each call gets (call N at
    /// step N), as `hook --seed N` fixes its one call's (step 1's).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `text`: one line per step, and the message of each condition that
    /// changed under it; `json`: one JSON object per step, and one
    /// with the objects of the namespace each time the loop settles.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub format: String,
}

/// The server's flags, each also read from the environment.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Address to listen on; the Helm chart passes 0.0.0.0:8080.
    #[arg(long, env = "OPSHOOKS_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Largest accepted request body in bytes (a parent with thousands of
    /// children needs tens of MiB).
    #[arg(long, env = "OPSHOOKS_MAX_BODY_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Seconds to read and answer one hook call; keep it below the hook
    /// timeout of the controllers (10 s by default).
    #[arg(long, env = "OPSHOOKS_REQUEST_TIMEOUT_SECONDS", default_value_t = 9.0)]
    pub request_timeout_seconds: f64,
    /// Seconds to let in-flight calls finish after SIGTERM or Ctrl-C.
    #[arg(long, env = "OPSHOOKS_SHUTDOWN_GRACE_SECONDS", default_value_t = 20.0)]
    pub shutdown_grace_seconds: f64,
    /// Seconds a client has for a TLS handshake and for a request's headers.
    #[arg(
        long,
        env = "OPSHOOKS_HEADER_READ_TIMEOUT_SECONDS",
        default_value_t = 5.0
    )]
    pub header_read_timeout_seconds: f64,
    /// Seconds a connection may stay open with no call in flight.
    #[arg(long, env = "OPSHOOKS_IDLE_TIMEOUT_SECONDS", default_value_t = 8.0)]
    pub idle_timeout_seconds: f64,
    /// Most hook computations at once; 0 means one per CPU core.
    #[arg(long, env = "OPSHOOKS_MAX_CONCURRENT_HOOKS", default_value_t = 0)]
    pub max_concurrent_hooks: usize,
    /// Most further hook calls waiting for a worker; past them a call is
    /// answered 429 with Retry-After. 0 means 256.
    #[arg(long, env = "OPSHOOKS_MAX_QUEUED_HOOKS", default_value_t = 0)]
    pub max_queued_hooks: usize,
    /// Most bytes of request bodies held by the calls in progress (a body
    /// counts its Content-Length, or --max-body-bytes without one); past it
    /// a call is answered 429 before its body is read. 0 means twice
    /// --max-body-bytes.
    #[arg(long, env = "OPSHOOKS_MAX_BUFFERED_BYTES", default_value_t = 0)]
    pub max_buffered_bytes: usize,
    /// The slowest a request body may arrive: bytes a second on average
    /// from 2 s after the call began, with no pause over 2 s; a slower one
    /// is answered 408 and frees its place. 0 turns the check off.
    #[arg(long, env = "OPSHOOKS_MIN_BODY_BYTES_PER_SECOND", default_value_t = DEFAULT_MIN_BODY_RATE)]
    pub min_body_bytes_per_second: u64,
    /// Most connections open at once; more wait to be accepted.
    #[arg(long, env = "OPSHOOKS_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key-file).
    #[arg(long, env = "OPSHOOKS_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The PEM private key of --tls-cert-file.
    #[arg(long, env = "OPSHOOKS_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// Accept only clients with a certificate signed by a CA in this PEM
    /// file (mutual TLS; needs --tls-cert-file).
    #[arg(long, env = "OPSHOOKS_TLS_CLIENT_CA_FILE", requires = "tls_cert_file")]
    pub tls_client_ca_file: Option<PathBuf>,
    /// Require `Authorization: Bearer <token>` on every hook route, with the
    /// token read from this file.
    #[arg(long, env = "OPSHOOKS_AUTH_TOKEN_FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// Require the bearer token on /metrics too.
    #[arg(long, env = "OPSHOOKS_METRICS_AUTH", requires = "auth_token_file")]
    pub metrics_auth: bool,
    /// Seconds between re-reads of the TLS and token files (they are swapped
    /// in when they change, as when cert-manager rotates a certificate).
    #[arg(long, env = "OPSHOOKS_RELOAD_INTERVAL_SECONDS", default_value_t = 10.0)]
    pub reload_interval_seconds: f64,
}

/// Logging flags.
#[derive(Debug, Args)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, env = "OPSHOOKS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain, global = true)]
    pub log_format: LogFormat,
    /// Log filter, in tracing's EnvFilter syntax: `info`, `debug`,
    /// `opshooks=debug`. Bodies are logged at debug, with Secret data removed.
    #[arg(long, env = "OPSHOOKS_LOG", default_value = "info", global = true)]
    pub log_level: String,
}

impl Config {
    /// Parses the command line, exiting with clap's message on a usage
    /// error (and its text for `--help` and `--version`).
    pub fn load() -> Config {
        Config::try_load_from(std::env::args_os()).unwrap_or_else(|err| err.exit())
    }

    /// Parses `args`. Server flags given after `serve` are the server's;
    /// given on both sides of it, they are refused, since neither side
    /// would be obviously meant.
    pub fn try_load_from<I, T>(args: I) -> Result<Config, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches, parser::ValueSource};
        let mut command = Config::command();
        let matches = command.try_get_matches_from_mut(args)?;
        let mut config = Config::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
        let ids: Vec<String> = ServerArgs::augment_args(clap::Command::new("serve"))
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect();
        let typed = |m: &clap::ArgMatches| {
            ids.iter()
                .any(|id| m.value_source(id) == Some(ValueSource::CommandLine))
        };
        if let Some(Command::Serve(args)) = &mut config.command {
            let after = matches.subcommand_matches("serve").is_some_and(typed);
            if after && typed(&matches) {
                return Err(command.error(
                    clap::error::ErrorKind::ArgumentConflict,
                    "server flags before and after `serve`: give them on one side (`opshooks serve --listen ...`)",
                ));
            }
            if after {
                std::mem::swap(&mut config.server, &mut args.server);
            }
        }
        Ok(config)
    }
}

/// How log lines look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// The server's settings, resolved from its flags: every duration checked,
/// the TLS files and the token loaded, and what to reload when it changes.
pub struct Settings {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Bodies, deadlines and concurrency.
    pub limits: Limits,
    /// Connection time limits, TLS and shutdown.
    pub options: ServeOptions,
    /// The bearer token, when one is asked for.
    pub token: Option<Arc<auth::Token>>,
    /// Whether `/metrics` asks for the token too.
    pub metrics_auth: bool,
    /// The files to re-read, and how often.
    pub watched: Vec<Arc<dyn Refresh>>,
    /// How often the watched files are re-read.
    pub reload_interval: Duration,
}

impl ServerArgs {
    /// The settings these flags ask for, or the one-line reason they cannot
    /// be had (a usage error: a non-positive duration, a file that does
    /// not load).
    pub fn settings(&self) -> Result<Settings, String> {
        let seconds = |flag: &str, value: f64| match Duration::try_from_secs_f64(value) {
            Ok(duration) if !duration.is_zero() => Ok(duration),
            _ => Err(format!("{flag} {value}: use a positive number of seconds")),
        };
        let limits = Limits::new(
            self.max_body_bytes,
            seconds("--request-timeout-seconds", self.request_timeout_seconds)?,
            self.max_concurrent_hooks,
            self.max_queued_hooks,
            self.max_buffered_bytes,
            self.min_body_bytes_per_second,
        );
        let tls = match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => Some(Arc::new(tls::load(&TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: self.tls_client_ca_file.clone(),
            })?)),
            _ => None,
        };
        let token = match &self.auth_token_file {
            Some(path) => Some(Arc::new(auth::load(path.clone())?)),
            None => None,
        };
        let mut watched: Vec<Arc<dyn Refresh>> = Vec::new();
        watched.extend(tls.clone().map(|tls| tls as Arc<dyn Refresh>));
        watched.extend(token.clone().map(|token| token as Arc<dyn Refresh>));
        let options = ServeOptions {
            header_read_timeout: seconds(
                "--header-read-timeout-seconds",
                self.header_read_timeout_seconds,
            )?,
            idle_timeout: seconds("--idle-timeout-seconds", self.idle_timeout_seconds)?,
            max_connections: self.max_connections,
            grace: seconds("--shutdown-grace-seconds", self.shutdown_grace_seconds)?,
            tls,
        };
        Ok(Settings {
            listen: self.listen,
            limits,
            options,
            token,
            metrics_auth: self.metrics_auth,
            watched,
            reload_interval: seconds("--reload-interval-seconds", self.reload_interval_seconds)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_consistent() {
        Config::command().debug_assert();
    }

    #[test]
    fn no_arguments_serves_on_loopback() {
        let config = Config::try_parse_from(["opshooks"]).unwrap();
        assert!(config.command.is_none());
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
        assert!(config.server.max_body_bytes >= 32 * 1024 * 1024);
    }

    #[test]
    fn server_flags_go_before_or_after_serve() {
        let listen = |args: &[&str]| {
            let config = Config::try_load_from(args).unwrap();
            assert!(matches!(config.command, None | Some(Command::Serve(_))));
            config.server.listen.to_string()
        };
        assert_eq!(
            listen(&["opshooks", "serve", "--listen", "0.0.0.0:9"]),
            "0.0.0.0:9"
        );
        assert_eq!(
            listen(&["opshooks", "--listen", "0.0.0.0:9", "serve"]),
            "0.0.0.0:9"
        );
        assert_eq!(listen(&["opshooks", "--listen", "0.0.0.0:9"]), "0.0.0.0:9");
        assert_eq!(listen(&["opshooks", "serve"]), "127.0.0.1:8080");
        let both = [
            "opshooks",
            "--listen",
            "0.0.0.0:9",
            "serve",
            "--max-connections",
            "5",
        ];
        let err = Config::try_load_from(both).unwrap_err();
        assert!(
            err.to_string().contains("before and after `serve`"),
            "{err}"
        );
        let help = Config::try_load_from(["opshooks", "serve", "--help"]).unwrap_err();
        assert!(help.to_string().contains("--listen"), "{help}");
    }

    #[test]
    fn manifests_refuse_a_base_url_that_is_not_one() {
        for good in [
            "http://opshooks.opshooks.svc",
            "https://h:8443/x/",
            "http://127.0.0.1:8080",
        ] {
            assert_eq!(base_url(good).as_deref(), Ok(good));
        }
        for bad in [
            "opshooks.svc",
            "ftp://h",
            "http://",
            "http://h?x=1",
            "http://h#a",
            "",
            "h t t p",
        ] {
            assert!(base_url(bad).is_err(), "{bad:?} accepted");
        }
        let err = Config::try_load_from(["opshooks", "manifests", "--base-url", "opshooks.svc"])
            .unwrap_err();
        assert!(err.to_string().contains("--base-url"), "{err}");
    }

    #[test]
    fn every_server_flag_reads_the_environment() {
        let command = Config::command();
        for arg in command.get_arguments() {
            if arg.get_id() == "help" || arg.get_id() == "version" {
                continue;
            }
            assert!(arg.get_env().is_some(), "--{} has no env", arg.get_id());
        }
    }
}
