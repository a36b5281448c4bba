//! Man pages and shell completions of every spares binary (`spares`, `sparesctl`, `sparesd`,
//! `spares-run`), made one way: from the binary's own clap definition, so they cannot drift
//! from `--help`, with an EXAMPLES and an EXIT STATUS section each binary states once.
//!
//! Each binary calls [`generate_if_asked`] first thing in `main`, which gives it a hidden
//! `generate` command that its own `--help` does not list:
//! `BIN generate man DIR` writes `BIN.SECTION` and one `BIN-<subcommand>.SECTION` per visible
//! subcommand; `BIN generate completions bash|zsh|fish [DIR]` prints or writes the completion
//! script under the name the shell looks for. `packaging/build-debs.sh` calls both.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::{Command, Parser, Subcommand, ValueEnum};
use clap_mangen::Man;
use roff::{bold, roman, Roff};

/// What a binary's pages say beyond its clap definition.
#[derive(Debug, Clone, Copy)]
pub struct Extra {
    /// The man section: `1` for user commands, `8` for the daemon.
    pub section: &'static str,
    /// Examples as (what it does, the command line). An example whose command starts with
    /// `BIN SUBCOMMAND ` is also shown on that subcommand's page.
    pub examples: &'static [(&'static str, &'static str)],
    /// Exit statuses as (status, meaning), shared by every page of the binary.
    pub exit_status: &'static [(&'static str, &'static str)],
}

/// `BIN generate ...`.
#[derive(Parser, Debug)]
#[command(
    name = "generate",
    about = "Man pages and shell completions (for packaging)"
)]
pub struct GenerateCmd {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand, Debug)]
enum What {
    /// Write the man pages into DIR (BIN.SECTION and BIN-<subcommand>.SECTION).
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print the completion script for SHELL, or write it into DIR under the name the shell
    /// looks for (bash: BIN, zsh: _BIN, fish: BIN.fish).
    Completions {
        #[arg(value_enum)]
        shell: Shell,
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// A shell with completions.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Shell {
    /// bash-completion.
    Bash,
    /// zsh.
    Zsh,
    /// fish.
    Fish,
}

/// What cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// A file or directory.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> GenerateError + '_ {
    move |source| GenerateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl GenerateCmd {
    /// Runs `generate` for the binary whose definition is `cmd`.
    pub fn run(&self, cmd: Command, extra: &Extra) -> Result<(), GenerateError> {
        match &self.what {
            What::Man { dir } => man_pages(cmd, extra, dir).map(|_| ()),
            What::Completions { shell, dir } => completions(cmd, *shell, dir.as_deref()),
        }
    }
}

/// When the program was called as `BIN generate ...`, does it for the binary whose
/// definition `cmd` gives, and exits (0, or 1 with the error); otherwise returns. The binaries
/// have no `generate` of their own (and `spares-run`'s program comes after `--`), so the word
/// cannot mean anything else.
pub fn generate_if_asked(cmd: impl FnOnce() -> Command, extra: &Extra) {
    let mut args = std::env::args_os();
    let _ = args.next();
    if args.next().as_deref() != Some(std::ffi::OsStr::new("generate")) {
        return;
    }
    let cmd = cmd();
    let bin = cmd.get_name().to_string();
    let g = GenerateCmd::command_for(&bin)
        .get_matches_from(std::iter::once(std::ffi::OsString::from("generate")).chain(args));
    let g =
        <GenerateCmd as clap::FromArgMatches>::from_arg_matches(&g).unwrap_or_else(|e| e.exit());
    match g.run(cmd, extra) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("{bin} generate: {e}");
            std::process::exit(1)
        }
    }
}

impl GenerateCmd {
    fn command_for(bin: &str) -> Command {
        <GenerateCmd as clap::CommandFactory>::command().bin_name(format!("{bin} generate"))
    }
}

/// Writes the binary's page and one per visible subcommand into `dir`; returns their paths.
pub fn man_pages(cmd: Command, extra: &Extra, dir: &Path) -> Result<Vec<PathBuf>, GenerateError> {
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let bin = cmd.get_name().to_string();
    let mut written = Vec::new();
    let mut pages = vec![(cmd.clone(), None)];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages.push((sub.clone(), Some(sub.get_name().to_string())));
    }
    for (page_cmd, sub) in pages {
        let name = page_cmd
            .get_display_name()
            .map(str::to_string)
            .unwrap_or_else(|| page_cmd.get_name().to_string());
        let path = dir.join(format!("{name}.{}", extra.section));
        let text = render(page_cmd, &bin, sub.as_deref(), extra);
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&text))
            .map_err(io_at(&path))?;
        written.push(path);
    }
    Ok(written)
}

/// One page: clap_mangen's sections, then EXAMPLES and EXIT STATUS.
pub fn render(cmd: Command, bin: &str, sub: Option<&str>, extra: &Extra) -> Vec<u8> {
    let has_args = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subs = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let has_version = cmd.get_version().is_some() || cmd.get_long_version().is_some();
    let man = Man::new(cmd).section(extra.section);
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = man.render_title(&mut out);
    let _ = man.render_name_section(&mut out);
    let _ = man.render_synopsis_section(&mut out);
    let _ = man.render_description_section(&mut out);
    if has_args {
        let _ = man.render_options_section(&mut out);
    }
    if has_subs {
        let _ = man.render_subcommands_section(&mut out);
    }
    let prefix = sub.map(|s| format!("{bin} {s}"));
    let examples: Vec<_> = extra
        .examples
        .iter()
        .filter(|(_, line)| match &prefix {
            None => true,
            Some(p) => line == p || line.starts_with(&format!("{p} ")),
        })
        .collect();
    let mut roff = Roff::new();
    if !examples.is_empty() {
        roff.control("SH", ["EXAMPLES"]);
        for (what, line) in examples {
            roff.control("TP", []);
            roff.text([bold(*line)]);
            roff.text([roman(*what)]);
        }
    }
    if !extra.exit_status.is_empty() {
        roff.control("SH", ["EXIT STATUS"]);
        for (status, meaning) in extra.exit_status {
            roff.control("TP", []);
            roff.text([bold(*status)]);
            roff.text([roman(*meaning)]);
        }
    }
    let _ = roff.to_writer(&mut out);
    if has_version {
        let _ = man.render_version_section(&mut out);
    }
    out
}

/// Prints the completion script, or writes it into `dir` under the name the shell looks for.
pub fn completions(
    mut cmd: Command,
    shell: Shell,
    dir: Option<&Path>,
) -> Result<(), GenerateError> {
    use clap_complete::Shell as S;
    let s = match shell {
        Shell::Bash => S::Bash,
        Shell::Zsh => S::Zsh,
        Shell::Fish => S::Fish,
    };
    let bin = cmd.get_name().to_string();
    match dir {
        None => clap_complete::generate(s, &mut cmd, &bin, &mut std::io::stdout()),
        Some(d) => {
            std::fs::create_dir_all(d).map_err(io_at(d))?;
            let path = clap_complete::generate_to(s, &mut cmd, &bin, d).map_err(io_at(d))?;
            // clap_complete names the bash file BIN.bash; bash-completion loads
            // completions/<command>.
            if matches!(s, S::Bash) {
                let target = d.join(&bin);
                std::fs::rename(&path, &target).map_err(io_at(&path))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXTRA: Extra = Extra {
        section: "1",
        examples: &[
            ("Show job 7.", "tool show 7"),
            ("Check the daemon.", "tool health"),
        ],
        exit_status: &[("0", "done"), ("3", "refused")],
    };

    fn tool() -> Command {
        Command::new("tool")
            .about("A tool")
            .subcommand(
                Command::new("show")
                    .about("Show a job")
                    .arg(clap::arg!(<JOB>)),
            )
            .subcommand(Command::new("health").about("Health"))
            .subcommand(Command::new("secret").hide(true))
    }

    #[test]
    fn every_page_has_examples_and_exit_status() {
        let dir = std::env::temp_dir().join(format!("manpage-test-{}", std::process::id()));
        let pages = man_pages(tool(), &EXTRA, &dir).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["tool.1", "tool-show.1", "tool-health.1"]);
        let top = std::fs::read_to_string(&pages[0]).unwrap();
        assert!(top.contains(".SH EXAMPLES"), "{top}");
        assert!(
            top.contains("tool show 7") && top.contains("tool health"),
            "{top}"
        );
        assert!(top.contains(".SH \"EXIT STATUS\""), "{top}");
        assert!(top.contains("refused"), "{top}");
        // A subcommand's page: its own examples only, the binary's exit statuses.
        let show = std::fs::read_to_string(&pages[1]).unwrap();
        assert!(
            show.contains("tool show 7") && !show.contains("tool health"),
            "{show}"
        );
        assert!(show.contains(".SH \"EXIT STATUS\""), "{show}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bash_completions_are_named_after_the_binary() {
        let dir = std::env::temp_dir().join(format!("manpage-compl-{}", std::process::id()));
        completions(tool(), Shell::Bash, Some(&dir)).unwrap();
        let text = std::fs::read_to_string(dir.join("tool")).unwrap();
        assert!(text.contains("show") && text.contains("health"), "{text}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
