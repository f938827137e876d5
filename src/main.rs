//! `distlock`: leased, named locks for shell scripts, cron jobs, deploy steps and CI steps.
//!
//! This file stays thin: parse the command line, dispatch, and turn the outcome into the exit
//! code docs/src/reference/exit-codes.md promises. Returning `ExitCode` (rather than calling `exit`) lets every
//! destructor run, so connections close and `run` stops its heartbeat thread.

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;

use distlock::exit::Exit;
use distlock::{cli, commands, output};

fn main() -> ExitCode {
    // A write past a file-size limit fails with an error rather than killing distlock.
    distlock::signals::survive_file_size_limit();
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
