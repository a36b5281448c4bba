//! `spares generate man DIR` and `spares generate completions SHELL [DIR]`: the man pages and
//! shell completions the Debian package installs (`packaging/build-debs.sh`), made from the same
//! clap definition as `--help`, so they cannot drift from the binary.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};

#[derive(Args)]
pub struct GenerateCmd {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Write spares.1 and one spares-<subcommand>.1 per subcommand into DIR.
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print the completion script for SHELL, or write it into DIR under the name the shell
    /// looks for (bash: spares, zsh: _spares, fish: spares.fish).
    Completions {
        #[arg(value_enum)]
        shell: Shell,
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

pub fn run(cmd: GenerateCmd, app: clap::Command) -> anyhow::Result<()> {
    match cmd.what {
        What::Man { dir } => man(app, &dir),
        What::Completions { shell, dir } => completions(app, shell, dir.as_deref()),
    }
}

fn man(app: clap::Command, dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    clap_mangen::generate_to(app, dir)
        .with_context(|| format!("cannot write man pages into {}", dir.display()))
}

fn completions(mut app: clap::Command, shell: Shell, dir: Option<&Path>) -> anyhow::Result<()> {
    use clap_complete::Shell as S;
    let shell = match shell {
        Shell::Bash => S::Bash,
        Shell::Zsh => S::Zsh,
        Shell::Fish => S::Fish,
    };
    match dir {
        None => clap_complete::generate(shell, &mut app, "spares", &mut std::io::stdout()),
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
            let path = clap_complete::generate_to(shell, &mut app, "spares", d)
                .with_context(|| format!("cannot write completions into {}", d.display()))?;
            // clap_complete names the bash file spares.bash; bash-completion loads
            // completions/<command>, so install it under the command's name.
            if matches!(shell, S::Bash) {
                let target = d.join("spares");
                std::fs::rename(&path, &target)
                    .with_context(|| format!("cannot rename {}", path.display()))?;
            }
        }
    }
    Ok(())
}
