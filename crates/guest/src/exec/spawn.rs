//! Starts an exec's process: directly when the line is plain words, else under a shell. The
//! child gets its own process group (so a timeout kills everything it started), stdin from
//! /dev/null and piped stdout and stderr.

use super::command_line::{plan, Plan};
use super::Request;
use crate::error::OpError;
use crate::reaper::{OnExit, Reaper};
use std::collections::BTreeMap;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// What became of a spawn.
pub enum Spawned {
    /// The process runs; its exit status goes to the `OnExit` given to [`spawn`].
    Running(Child),
    /// A direct exec failed the way bash reports it: print `stderr`, exit with `exit_code`
    /// (127 not found, 126 not executable). No callback stays registered.
    Failed { exit_code: i32, stderr: String },
}

/// Spawns `req` with `base_env` under it, registering a callback made by `on_exit` with the
/// reaper.
///
/// # Errors
/// `NotFound` when the working directory does not exist, `Io` when the process cannot start.
pub fn spawn(
    reaper: &Reaper,
    base_env: &BTreeMap<String, String>,
    default_cwd: &Path,
    req: &Request,
    on_exit: &dyn Fn() -> OnExit,
) -> Result<Spawned, OpError> {
    let cwd = match &req.cwd {
        Some(dir) => default_cwd.join(dir),
        None => default_cwd.to_path_buf(),
    };
    if !cwd.is_dir() {
        let msg = format!("working directory {} does not exist", cwd.display());
        return Err(OpError::new(
            pandastack_guest_protocol::ErrorCode::NotFound,
            msg,
        ));
    }
    let words = match plan(&req.cmd) {
        Plan::Direct(words) => words,
        Plan::Shell => return shell(reaper, base_env, &cwd, req, on_exit),
    };
    let mut cmd = command(&words[0], &words[1..], base_env, &req.env, &cwd);
    match reaper.spawn(&mut cmd, on_exit()) {
        Ok(child) => Ok(Spawned::Running(child)),
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            shell(reaper, base_env, &cwd, req, on_exit)
        }
        Err(e) => Ok(bash_like_failure(&words[0], &e)),
    }
}

fn shell(
    reaper: &Reaper,
    base_env: &BTreeMap<String, String>,
    cwd: &Path,
    req: &Request,
    on_exit: &dyn Fn() -> OnExit,
) -> Result<Spawned, OpError> {
    let shell = if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    let args = ["-c".to_string(), req.cmd.clone()];
    let mut cmd = command(shell, &args, base_env, &req.env, cwd);
    reaper
        .spawn(&mut cmd, on_exit())
        .map(Spawned::Running)
        .map_err(|e| OpError::io(shell, &e))
}

fn command(
    program: &str,
    args: &[String],
    base_env: &BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> Command {
    let mut cmd = Command::new(resolve(
        program,
        env.get("PATH").or_else(|| base_env.get("PATH")),
    ));
    cmd.args(args)
        .env_clear()
        .envs(base_env)
        .envs(env)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    cmd
}

/// The absolute path of `program` found on `path` (or `program` unchanged when it has a `/` or
/// is not found). An absolute program lets std start it with `posix_spawn` (vfork-style, no
/// address-space copy) instead of fork + exec: under gVisor's ptrace platform a fork costs
/// ~10 ms, so this is most of an exec's latency. (std falls back to fork when it has to search
/// a PATH that the command's environment overrides.)
fn resolve(program: &str, path: Option<&String>) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    if program.contains('/') {
        return program.into();
    }
    let search = path
        .map(String::as_str)
        .unwrap_or("/usr/local/bin:/usr/bin:/bin");
    for dir in search.split(':').filter(|d| !d.is_empty()) {
        let candidate = Path::new(dir).join(program);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return candidate;
            }
        }
    }
    program.into()
}

/// What bash prints and returns when it cannot run `program`.
fn bash_like_failure(program: &str, err: &io::Error) -> Spawned {
    let (exit_code, what) = match err.kind() {
        io::ErrorKind::NotFound if program.contains('/') => (127, "No such file or directory"),
        io::ErrorKind::NotFound => (127, "command not found"),
        io::ErrorKind::PermissionDenied => (126, "Permission denied"),
        _ => (126, "cannot execute"),
    };
    Spawned::Failed {
        exit_code,
        stderr: format!("bash: {program}: {what}\n"),
    }
}
