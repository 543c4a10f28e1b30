//! Exit statuses, one rule for every command: 0 success, 1 a valid request that cannot be met,
//! 2 invalid input or usage. A command marks "cannot be met" with [`Unmet`]; every other error
//! is invalid input (clap's own usage errors already exit 2). A command whose 1 means something
//! more precise (`conformance`: a check failed; `env diff`: the two differ) states its own
//! "Exit status:" block in its help, and then gets no second one.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

/// Printed in `accel --help`; README.md says the same.
pub const HELP: &str = "Exit status:\n  0  success\n  1  a valid request that cannot be met (for example `accel plan`: infeasible)\n  2  invalid input or usage (bad arguments, unreadable or malformed files, unknown sample)";

/// A valid request that cannot be met (exit status 1). Wrap it in an `anyhow::Error`:
/// `return Err(Unmet(format!("cannot place the request: {why}")).into())`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmet(pub String);

impl std::fmt::Display for Unmet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unmet {}

/// Parses the command line with [`HELP`] appended to the `--help` of the program and of every
/// subcommand (present and future ones alike) that does not state its own exit statuses. Usage
/// errors exit 2, `--help` 0 (clap's rule).
pub fn parse<T: CommandFactory + FromArgMatches>() -> T {
    let cmd = with_help(T::command());
    let matches = cmd.get_matches();
    T::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

pub(crate) fn with_help(cmd: clap::Command) -> clap::Command {
    let text = match cmd.get_after_help().map(|b| b.to_string()) {
        Some(before) if before.contains(OWN) => before,
        Some(before) => format!("{before}\n\n{HELP}"),
        None => HELP.to_owned(),
    };
    cmd.after_help(text).mut_subcommands(with_help)
}

/// How a command's own help begins its exit statuses (then [`HELP`] is not added).
const OWN: &str = "Exit status:\n";

/// Prints the error (one line) and turns a command's outcome into its exit status.
pub fn report(result: anyhow::Result<()>) -> ExitCode {
    let status = code(&result);
    if let Err(e) = &result {
        if status != ExitCode::SUCCESS {
            eprintln!("accel: error: {e:#}");
        }
    }
    status
}

/// The status for a command's outcome.
pub fn code(result: &anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`accel topo | head`) is not an error worth a status.
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) => {
            ExitCode::SUCCESS
        }
        Err(e) if e.chain().any(|c| c.is::<Unmet>()) => ExitCode::from(1),
        Err(_) => ExitCode::from(2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn every_help_states_exit_statuses_once() {
        fn walk(cmd: &mut clap::Command, path: &str) {
            let help = cmd.render_long_help().to_string();
            assert_eq!(help.matches("Exit status").count(), 1, "{path} --help:\n{help}");
            // clap's own `help` subcommand prints other commands' help.
            for sub in cmd.get_subcommands_mut().filter(|s| s.get_name() != "help") {
                let name = format!("{path} {}", sub.get_name());
                walk(sub, &name);
            }
        }
        walk(&mut with_help(crate::Cli::command()), "accel");
    }

    #[test]
    fn unmet_is_one_everything_else_two() {
        assert_eq!(code(&Ok(())), ExitCode::SUCCESS);
        let unmet: anyhow::Result<()> = Err(Unmet("no".into()).into());
        assert_eq!(code(&unmet), ExitCode::from(1));
        let wrapped: anyhow::Result<()> = Err(anyhow::Error::new(Unmet("no".into()))).context("planning");
        assert_eq!(code(&wrapped), ExitCode::from(1));
        assert_eq!(code(&Err(anyhow::anyhow!("bad file"))), ExitCode::from(2));
        let pipe: anyhow::Result<()> = Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe).into());
        assert_eq!(code(&pipe), ExitCode::SUCCESS);
    }
}
