//! `template bake [NAME]... [--force] [--data-dir DIR]`: baking writes the server's data dir, so
//! it is not an API call. The command re-runs this same `pandastack` executable as
//! `pandastack template-bake ...` (the binary's server-side bake command) with stdio inherited,
//! and exits with its exit code; `PANDASTACK_DATA_DIR` and `PANDASTACK_LOG` pass through.

use crate::error::{CliError, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::Command;

/// The binary's own bake command that this one runs.
pub const LOCAL_BAKE_COMMAND: &str = "template-bake";

/// Flags of `template bake`.
#[derive(Debug, Clone, Args)]
pub struct BakeArgs {
    /// Template names (`base`, `code-interpreter`); all built-ins when none are given.
    #[arg(value_name = "NAME")]
    pub names: Vec<String>,
    /// Build again even when the recipe is unchanged (bumps the generation).
    #[arg(long)]
    pub force: bool,
    /// The server's data dir (default: `PANDASTACK_DATA_DIR`, else `/var/lib/pandastack`).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// The arguments after the executable for the local bake.
pub fn bake_argv(args: &BakeArgs) -> Vec<std::ffi::OsString> {
    let mut argv: Vec<std::ffi::OsString> = vec![LOCAL_BAKE_COMMAND.into()];
    if let Some(d) = &args.data_dir {
        argv.push("--data-dir".into());
        argv.push(d.clone().into_os_string());
    }
    if args.force {
        argv.push("--force".into());
    }
    argv.extend(args.names.iter().map(Into::into));
    argv
}

/// Runs the bake; returns its exit code.
pub fn run(args: &BakeArgs) -> Result<i32> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::io("locating the pandastack executable", e))?;
    let status = Command::new(&exe)
        .args(bake_argv(args))
        .status()
        .map_err(|e| {
            CliError::io(
                format!("running `pandastack {LOCAL_BAKE_COMMAND}` (run it on the server host)"),
                e,
            )
        })?;
    Ok(status.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_for_the_local_bake() {
        let a = BakeArgs {
            names: vec!["base".into()],
            force: true,
            data_dir: Some("/d".into()),
        };
        let got: Vec<String> = bake_argv(&a)
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            got,
            vec!["template-bake", "--data-dir", "/d", "--force", "base"]
        );
    }
}
