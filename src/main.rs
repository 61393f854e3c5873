//! The opshooks binary: parse flags, set up logging, then serve or run one
//! subcommand. Errors become a line on stderr and an exit code.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use opshooks::cli::{self, Failure};
use opshooks::config::{Command, Config, ServerArgs};
use opshooks::http::{self, AppState, Limits};
use opshooks::{operators, telemetry};

fn main() -> ExitCode {
    let config = Config::parse();
    if let Err(message) = telemetry::init(&config.log) {
        eprintln!("opshooks: {message}");
        return ExitCode::from(2);
    }
    let result = match &config.command {
        None | Some(Command::Serve) => serve(&config.server),
        Some(Command::Hook(args)) => cli::hook(args),
        Some(Command::Openapi) => cli::openapi(),
        Some(Command::Manifests(args)) => cli::manifests(args),
        Some(Command::Simulate(args)) => cli::simulate(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { message, code }) => {
            eprintln!("opshooks: {message}");
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
    }
}

fn serve(args: &ServerArgs) -> Result<(), Failure> {
    let ServerArgs {
        listen,
        max_body_bytes,
        request_timeout_seconds,
        shutdown_grace_seconds,
    } = *args;
    let seconds = |flag: &str, value: f64| {
        Duration::try_from_secs_f64(value).map_err(|_| Failure {
            message: format!("{flag} {value}: use a positive number of seconds"),
            code: 2,
        })
    };
    let limits = Limits {
        max_body_bytes,
        request_timeout: seconds("--request-timeout-seconds", request_timeout_seconds)?,
    };
    let grace = seconds("--shutdown-grace-seconds", shutdown_grace_seconds)?;
    let runtime = tokio::runtime::Runtime::new().map_err(|err| Failure {
        message: format!("cannot start the runtime: {err}"),
        code: 1,
    })?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|err| Failure {
                message: format!("cannot listen on {listen}: {err}; pick another with --listen"),
                code: 1,
            })?;
        let ops = operators::all();
        let names: Vec<_> = ops.iter().map(|op| op.name).collect();
        tracing::info!(address = %listen, operators = ?names, "serving");
        let state = AppState::new(ops, limits, http::system_clock());
        http::serve(listener, state, http::shutdown_signal(), grace)
            .await
            .map_err(|err| Failure {
                message: format!("server error: {err}"),
                code: 1,
            })
    })
}
