//! Logging set-up: plain or JSON lines on stderr, filtered by an EnvFilter
//! directive. Output goes to stderr so `opshooks hook` keeps stdout for the
//! response body alone.

use tracing_subscriber::EnvFilter;

use crate::config::{LogArgs, LogFormat};

/// Installs the global subscriber. Fails on a bad filter directive.
pub fn init(args: &LogArgs) -> Result<(), String> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|err| format!("--log-level {:?}: {err}", args.log_level))?;
    // Colours only for a person at a terminal, never in collected logs.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|err| format!("logging: {err}"))
}
