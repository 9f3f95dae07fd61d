//! Starts an exec's process: directly when the line is plain words, else under a shell. The
//! child gets its own process group (so a timeout kills everything it started), stdin from
//! /dev/null and piped stdout and stderr. Processes start through [`super::vfork`].

use super::command_line::{plan, Plan};
use super::vfork::{self, Prepared};
use super::warm::{self, ExitSlot, WarmShell};
use super::Request;
use crate::error::OpError;
use crate::reaper::{OnExit, Reaper};
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex};

/// A started process: its pid (= process group id) and the read ends of its output pipes.
pub struct Child {
    pub pid: i32,
    pub stdout: File,
    pub stderr: File,
}

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
    warm: &Mutex<Option<WarmShell>>,
    base_env: &BTreeMap<String, String>,
    default_cwd: &Path,
    req: &Request,
    on_exit: &dyn Fn() -> OnExit,
) -> Result<Spawned, OpError> {
    let (env, cwd) = context(base_env, default_cwd, req);
    if !cwd.is_dir() {
        let msg = format!("working directory {} does not exist", cwd.display());
        return Err(OpError::new(
            pandastack_guest_protocol::ErrorCode::NotFound,
            msg,
        ));
    }
    let words = match plan(&req.cmd) {
        Plan::Direct(words) => words,
        Plan::Shell => return shell(reaper, warm, &env, &cwd, req, on_exit),
    };
    let program = resolve(&words[0], env.get("PATH"));
    match start(reaper, &program, &words, &env, &cwd, None, on_exit()) {
        Ok(child) => Ok(Spawned::Running(child)),
        Err(e) if e.raw_os_error() == Some(libc::ENOEXEC) => {
            shell(reaper, warm, &env, &cwd, req, on_exit)
        }
        Err(e) => Ok(bash_like_failure(&words[0], &e)),
    }
}

fn shell(
    reaper: &Reaper,
    warm: &Mutex<Option<WarmShell>>,
    env: &BTreeMap<String, String>,
    cwd: &Path,
    req: &Request,
    on_exit: &dyn Fn() -> OnExit,
) -> Result<Spawned, OpError> {
    let key = (env.clone(), cwd.to_path_buf());
    let ready = lock(warm).take().filter(|w| w.key == key);
    if let Some(child) = ready.and_then(|w| w.claim(&req.cmd, on_exit())) {
        return Ok(Spawned::Running(child));
    }
    let shell = shell_path();
    let argv = [shell.to_string(), "-c".to_string(), req.cmd.clone()];
    start(reaper, shell, &argv, env, cwd, None, on_exit())
        .map(Spawned::Running)
        .map_err(|e| OpError::io(shell, &e))
}

fn shell_path() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts the next warm shell for `env` and `cwd` (see [`super::warm`]) unless one is waiting.
pub fn prewarm(
    reaper: &Reaper,
    warm: &Mutex<Option<WarmShell>>,
    env: &BTreeMap<String, String>,
    cwd: &Path,
) {
    if lock(warm).is_some() || shell_path() != "/bin/bash" {
        return;
    }
    let started = (|| -> io::Result<WarmShell> {
        let (command_r, command_in) = pipe()?;
        let slot = Arc::new(ExitSlot::default());
        let argv = [
            "bash".to_string(),
            "--norc".into(),
            "--noprofile".into(),
            "-c".into(),
            warm::SCRIPT.into(),
        ];
        let child = start(
            reaper,
            "/bin/bash",
            &argv,
            env,
            cwd,
            Some(command_r.as_raw_fd()),
            slot.forwarder(),
        )?;
        drop(command_r);
        Ok(WarmShell {
            key: (env.clone(), cwd.to_path_buf()),
            child,
            command_in: File::from(command_in),
            slot,
        })
    })();
    match started {
        Ok(w) => *lock(warm) = Some(w),
        Err(e) => glog!("cannot start a warm shell: {e}"),
    }
}

/// The merged environment and resolved working directory of `req` (the warm shell's key).
pub fn context(
    base_env: &BTreeMap<String, String>,
    default_cwd: &Path,
    req: &Request,
) -> (BTreeMap<String, String>, std::path::PathBuf) {
    let mut env = base_env.clone();
    env.extend(req.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let cwd = match &req.cwd {
        Some(dir) => default_cwd.join(dir),
        None => default_cwd.to_path_buf(),
    };
    (env, cwd)
}

fn pipe() -> io::Result<(File, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh fds that nothing else owns.
    Ok(unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn start(
    reaper: &Reaper,
    program: &str,
    argv: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
    stdin: Option<RawFd>,
    on_exit: OnExit,
) -> io::Result<Child> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let devnull = File::open("/dev/null")?;
    let stdin = stdin.unwrap_or(devnull.as_raw_fd());
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let cwd = cwd.to_str().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "working directory is not UTF-8",
        )
    })?;
    let mut prepared = Prepared::new(
        program,
        argv,
        &env,
        cwd,
        [stdin, out_w.as_raw_fd(), err_w.as_raw_fd()],
    )?;
    let pid = reaper.spawn_with(|| vfork::spawn(&mut prepared), on_exit)?;
    // The write ends now belong to the child; ours close here so the pipes end with it.
    drop((out_w, err_w, devnull));
    Ok(Child {
        pid,
        stdout: out_r,
        stderr: err_r,
    })
}

/// The absolute path of `program` found on `path` (or `program` unchanged when it has a `/` or
/// is not found, so that `execve` reports the error).
fn resolve(program: &str, path: Option<&String>) -> String {
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
                return candidate.display().to_string();
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
