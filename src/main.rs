//! `distlock`: leased, named locks for shell scripts, cron jobs, deploy steps and CI steps.
//!
//! This file stays thin: parse the command line, dispatch, and turn the outcome into the exit
//! code the contract promises. Returning `ExitCode` (rather than calling `exit`) lets every
//! destructor run, so connections close and `run` stops its heartbeat thread.

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

use distlock::exit::Exit;
use distlock::{cli, commands, output};

fn main() -> ExitCode {
    // Past a file-size limit (`ulimit -f`) a write would kill distlock with SIGXFSZ, leaving no
    // message and, under `run`, an unguarded command. With a handler installed the write fails
    // with EFBIG instead, which is an ordinary store error (74). `exec` resets handlers, so
    // `run`'s command keeps the default.
    let _ = signal_hook::flag::register(
        signal_hook::consts::SIGXFSZ,
        std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err)
            if err.kind() == ErrorKind::DisplayVersion && cli::version_with_extra_arguments() =>
        {
            output::warn(format_args!("--version takes no other arguments"));
            return Exit::Usage.into();
        }
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            // Help and the version are answers too: one that cannot be written is an error.
            return match output::print_help(&err) {
                Ok(()) => Exit::Done,
                Err(failed) => {
                    output::warn(format_args!("{failed}"));
                    failed.exit()
                }
            }
            .into();
        }
        Err(err) => {
            match cli::refusal(&err) {
                Some(text) => eprint!("{text}"),
                None => {
                    let _ = err.print();
                }
            }
            return Exit::Usage.into();
        }
    };
    match commands::dispatch(cli) {
        Ok(exit) => exit.into(),
        Err(err) => {
            output::warn(format_args!("{err}"));
            err.exit().into()
        }
    }
}
