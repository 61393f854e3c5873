//! The opshooks binary: parse flags, set up logging, then serve or run one
//! subcommand. Errors become a line on stderr and an exit code.

use std::process::ExitCode;

use opshooks::cli::{self, Failure};
use opshooks::config::{Command, Config, ServerArgs, Settings};
use opshooks::http::reload;
use opshooks::http::{self, AppState};
use opshooks::{operators, telemetry};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process. mimalloc asks for
/// them on its arena, and where the kernel grants them on request (the
/// common `madvise` setting) the first touch of each 2 MiB makes all of it
/// resident: an idle server held four huge pages, 8 MiB, for a few KiB of
/// heap. Our heap is small and short-lived, so small pages cost nothing.
///
/// It runs as a constructor, before mimalloc's own (priority 101) and so
/// before the first allocation: from `main`, the arena's first two huge
/// pages (4 MiB) were already resident.
#[cfg(target_os = "linux")]
extern "C" fn no_huge_pages() {
    #[allow(unsafe_code)]
    // SAFETY: PR_SET_THP_DISABLE only sets a flag of this process; it takes
    // no pointers.
    unsafe {
        // A kernel without the flag refuses it; huge pages then stay as
        // they were, which costs memory, not correctness.
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
#[used]
// SAFETY: a constructor that allocates nothing and only sets a process flag.
#[unsafe(link_section = ".init_array.00100")]
static NO_HUGE_PAGES: extern "C" fn() = no_huge_pages;

fn main() -> ExitCode {
    let config = Config::load();
    let log = match telemetry::init(&config.log) {
        Ok(log) => log,
        Err(message) => {
            eprintln!("opshooks: {message}");
            return ExitCode::from(2);
        }
    };
    let result = match &config.command {
        None | Some(Command::Serve(_)) => serve(&config.server),
        Some(Command::Hook(args)) => cli::hook(args),
        Some(Command::Openapi) => cli::openapi(),
        Some(Command::Manifests(args)) => cli::manifests(args),
        Some(Command::Simulate(args)) => cli::simulate(args),
        Some(Command::Render(args)) => cli::render(args),
        Some(Command::Report(args)) => cli::report(args),
    };
    // Every queued log line is out before the last word, and before exit.
    drop(log);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { message, code }) => {
            eprintln!("opshooks: {message}");
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
    }
}

fn serve(args: &ServerArgs) -> Result<(), Failure> {
    let Settings {
        listen,
        limits,
        options,
        token,
        metrics_auth,
        watched,
        reload_interval,
    } = args.settings().map_err(usage)?;
    let runtime = tokio::runtime::Runtime::new().map_err(|err| Failure {
        message: format!("cannot start the runtime: {err}"),
        code: 1,
    })?;
    let scheme = if options.tls.is_some() {
        "https"
    } else {
        "http"
    };
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|err| Failure {
                message: format!("cannot listen on {listen}: {err}; pick another with --listen"),
                code: 1,
            })?;
        reload::spawn(watched, reload_interval);
        let ops = operators::all();
        let names: Vec<_> = ops.iter().map(|op| op.name).collect();
        let mut state = AppState::new(ops, limits, http::system_clock());
        if let Some(token) = token {
            state = state.with_token(token, metrics_auth);
        }
        tracing::info!(address = %listen, scheme, operators = ?names, "serving");
        http::serve(listener, state, http::shutdown_signal(), options)
            .await
            .map_err(|err| Failure {
                message: format!("server error: {err}"),
                code: 1,
            })
    })
}

fn usage(message: String) -> Failure {
    Failure { message, code: 2 }
}
