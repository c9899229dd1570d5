//! `wardcell completions bash|zsh|fish`: the shell completion script, made by
//! clap_complete from the same clap types the command line is parsed with.
//!
//! The script covers every command, wherever it is printed, so the one the packages
//! install (`packaging/build` runs this) is the one a user prints; completing a command
//! that does not work where the shell runs gives that command's refusal, not a wrong
//! completion.

use std::io::Write;

use clap::CommandFactory;

use crate::cli::{Cli, Shell};
use crate::error::Error;

/// The completion script for `shell`.
pub fn script(shell: Shell) -> Vec<u8> {
    let shell = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "wardcell", &mut out);
    out
}

pub fn print(shell: Shell) -> Result<(), Error> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(&script(shell))
        .and_then(|()| stdout.flush())
        .map_err(Error::Stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shell_completes_the_commands_and_their_options() {
        for (shell, marker, option) in [
            (Shell::Bash, "complete -F _wardcell", "--zone"),
            (Shell::Zsh, "#compdef wardcell", "--zone"),
            (Shell::Fish, "complete -c wardcell", "-l zone"),
        ] {
            let text = String::from_utf8(script(shell)).unwrap();
            assert!(text.contains(marker), "{shell:?}: {marker}");
            for word in ["run", "enter", "policy", "approvals", "completions", option] {
                assert!(text.contains(word), "{shell:?} lacks {word}");
            }
        }
    }
}
