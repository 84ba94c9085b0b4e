//! `annal completions SHELL` and `annal man`: the shell completion script and the manual page,
//! generated (by `clap_complete` and `clap_mangen`) from the same clap definition the command
//! line is parsed with, so they cannot drift from it. Both print to stdout; a closed pipe ends
//! them quietly, as every printing command.

use std::process::ExitCode;

use clap::CommandFactory;

/// Arguments of `annal completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

/// Prints the completion script of `C` (the `annal` command line) for the chosen shell.
pub fn completions<C: CommandFactory>(args: &CompletionsArgs) -> ExitCode {
    let mut command = C::command();
    let name = command.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, name, &mut script);
    print(&script)
}

/// Prints the manual page of `C` (roff).
pub fn man<C: CommandFactory>() -> ExitCode {
    let mut page = Vec::new();
    match clap_mangen::Man::new(C::command()).render(&mut page) {
        Ok(()) => print(&page),
        Err(error) => crate::report_error(&crate::CliError::unavailable(format!(
            "the manual page could not be rendered: {error}"
        ))),
    }
}

fn print(bytes: &[u8]) -> ExitCode {
    match crate::write_out(&String::from_utf8_lossy(bytes)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}
