//! `template build NAME -f Dockerfile [--context DIR] [--cpu N] [--memory-mb M] [--size-mb S]`
//! and `template build NAME --rootfs rootfs.tar`: `POST /v1/templates/build` as multipart
//! through the SDK (contract §2.8: text fields, one file part per context file named by its
//! relative path, or a `rootfs` file part), then the build log streamed live to stdout
//! (`GET .../logs?follow=1`)
//! with a progress line on stderr when it is a terminal, then the final status. Exits 0 when
//! the build is done, 1 when it failed (its error printed). `--no-wait` prints the queued build
//! instead. With `-o json` the log goes to stderr and the final TemplateBuild to stdout.

use super::build_logs;
use crate::commands::{print_json, Ctx};
use crate::error::{CliError, Result};
use crate::output;
use clap::Args;
use pandastack_sdk::template_builds::{BuildOptions, ContextFile};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Flags of `template build`.
#[derive(Debug, Clone, Args)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["file", "rootfs"]))]
pub struct BuildArgs {
    /// Template name (per workspace; not a built-in name).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The Dockerfile.
    #[arg(short = 'f', long = "file", value_name = "DOCKERFILE")]
    pub file: Option<PathBuf>,
    /// Directory whose files COPY/ADD can use (sent as the build context).
    #[arg(long, value_name = "DIR", requires = "file")]
    pub context: Option<PathBuf>,
    /// A rootfs tar (or tar.gz) to use as the template's root filesystem.
    #[arg(long, value_name = "TAR")]
    pub rootfs: Option<PathBuf>,
    /// vCPUs of the template's sandboxes.
    #[arg(long)]
    pub cpu: Option<u32>,
    /// Memory of the template's sandboxes, MiB.
    #[arg(long)]
    pub memory_mb: Option<u32>,
    /// Disk size, MiB (server default 1024).
    #[arg(long)]
    pub size_mb: Option<u32>,
    /// Print the accepted build and return without waiting for it.
    #[arg(long)]
    pub no_wait: bool,
}

/// Submits the build and follows it; returns the exit code.
pub fn run(args: &BuildArgs, ctx: &Ctx) -> Result<i32> {
    let client = ctx.client()?;
    let options = BuildOptions {
        cpu: args.cpu,
        memory_mb: args.memory_mb,
        size_mb: args.size_mb,
    };
    let templates = client.templates();
    let build = if let Some(rootfs) = &args.rootfs {
        ctx.block(templates.build_rootfs(&args.name, rootfs, &options))?
    } else {
        let Some(path) = &args.file else {
            return Err(CliError::Usage("give -f DOCKERFILE or --rootfs TAR".into()));
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| CliError::io(format!("reading {}", path.display()), e))?;
        let context = match &args.context {
            Some(dir) => context_files(dir)?
                .into_iter()
                .map(|(path, file)| ContextFile { path, file })
                .collect(),
            None => Vec::new(),
        };
        ctx.block(templates.build_from_dockerfile(&args.name, &text, &context, &options))?
    };
    if args.no_wait {
        if ctx.json() {
            return print_json(&build).map(|_| 0);
        }
        return output::line(&format!(
            "build {} of template {} is {}",
            build.id, build.name, build.status
        ))
        .map(|_| 0);
    }
    eprintln!(
        "build {} of template {}: {}",
        build.id, build.name, build.status
    );
    let mut progress = Spinner::new(&build.name);
    let to_stderr = ctx.json();
    build_logs::stream(ctx, &client, &build.id, true, &mut |line| {
        progress.clear();
        let written = if to_stderr {
            writeln!(std::io::stderr(), "{line}")
        } else {
            let mut out = std::io::stdout();
            writeln!(out, "{line}").and_then(|_| out.flush())
        };
        written.map_err(|e| CliError::io("writing the build log", e))?;
        progress.update(line);
        Ok(())
    })?;
    progress.clear();
    let last = ctx.block(templates.get_build(&build.id))?;
    if ctx.json() {
        print_json(&last)?;
    }
    match last.status.as_str() {
        "done" => {
            eprintln!(
                "template {} is ready (generation {}{})",
                last.name,
                last.generation.unwrap_or_default(),
                if last.cache_hit {
                    ", nothing changed"
                } else {
                    ""
                }
            );
            Ok(0)
        }
        "failed" => Err(CliError::Stream(format!(
            "build {} failed: {}",
            last.id,
            last.error.unwrap_or_default()
        ))),
        other => Err(CliError::Stream(format!(
            "build {} ended its log while {other}",
            last.id
        ))),
    }
}

/// Regular files under `dir` (symlinks to files followed, symlinked directories not), with
/// their `/`-separated paths relative to `dir`, sorted.
///
/// Errors: `dir` or a subdirectory cannot be read.
pub fn context_files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d)
            .map_err(|e| CliError::io(format!("reading {}", d.display()), e))?;
        for entry in entries {
            let entry = entry.map_err(|e| CliError::io(format!("reading {}", d.display()), e))?;
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| CliError::io(format!("reading {}", path.display()), e))?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() || (kind.is_symlink() && path.is_file()) {
                let rel = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                out.push((rel, path));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A one-line progress indicator on stderr (terminal only): spinner, elapsed time, the last
/// `Step i/n` line.
struct Spinner {
    name: String,
    step: String,
    started: Instant,
    frame: usize,
    enabled: bool,
    drawn: bool,
}

impl Spinner {
    fn new(name: &str) -> Self {
        Spinner {
            name: name.into(),
            step: "queued".into(),
            started: Instant::now(),
            frame: 0,
            enabled: std::io::stderr().is_terminal(),
            drawn: false,
        }
    }

    fn update(&mut self, line: &str) {
        if line.starts_with("Step ") || line.starts_with("Taking the template snapshot") {
            self.step = line.chars().take(60).collect();
        }
        if !self.enabled {
            return;
        }
        const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
        self.frame = (self.frame + 1) % FRAMES.len();
        eprint!(
            "\r{} building {} ({:.0} s) {}\x1b[K",
            FRAMES[self.frame],
            self.name,
            self.started.elapsed().as_secs_f64(),
            self.step
        );
        self.drawn = true;
    }

    fn clear(&mut self) {
        if self.drawn {
            eprint!("\r\x1b[K");
            self.drawn = false;
        }
    }
}
