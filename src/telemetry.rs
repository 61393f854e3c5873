//! Logging set-up: plain or JSON lines on stderr, filtered by an EnvFilter
//! directive. Output goes to stderr so `opshooks hook` keeps stdout for the
//! response body alone.

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

use crate::config::{LogArgs, LogFormat};

/// How many log lines may wait for the writer thread.
const QUEUED_LINES: usize = 1024;

/// Installs the global subscriber. Fails on a bad filter directive.
///
/// Lines are written to stderr by a thread of their own: a hook call only
/// formats its line and queues it, instead of waiting for a `write` to the
/// log file or pipe (about a tenth of a small call's time). Nothing is
/// dropped: a full queue makes the caller wait. The queue holds
/// `QUEUED_LINES` lines, far more than the writer ever falls behind; the
/// library's default (128,000) is allocated and touched up front, 4 MiB of
/// an idle server's memory. Keep the guard until the end; dropping it
/// writes out what is queued.
pub fn init(args: &LogArgs) -> Result<WorkerGuard, String> {
    let filter = EnvFilter::try_new(&args.log_level)
        .map_err(|err| format!("--log-level {:?}: {err}", args.log_level))?;
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("opshooks-log")
        .finish(std::io::stderr());
    // Colours only for a person at a terminal, never in collected logs.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(writer);
    let result = match args.log_format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|err| format!("logging: {err}"))?;
    Ok(guard)
}
