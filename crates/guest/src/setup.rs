//! Start-up: the directories and default environment every sandbox process gets.
//!
//! As PID 1 the guest creates `/workspace` and `/tmp` (mode 1777). Run as an ordinary process
//! (tests on a host) it changes nothing on the filesystem and uses `/workspace` only if it already
//! exists, else its own current directory.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Default directory of commands, kernels and relative paths.
pub const WORKSPACE: &str = "/workspace";

/// Variables every process gets unless the sandbox's own environment already sets them.
pub const DEFAULT_ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("HOME", "/root"),
    ("LANG", "C.UTF-8"),
    ("PYTHONUNBUFFERED", "1"),
    ("MPLBACKEND", "Agg"),
];

/// What every request handler needs to know about the sandbox.
#[derive(Debug, Clone)]
pub struct Config {
    /// Environment of spawned processes before a request's own variables.
    pub env: BTreeMap<String, String>,
    /// Default working directory.
    pub cwd: PathBuf,
    /// Directory holding this binary and `kernel.py` (`/.pandastack` in a sandbox).
    pub guest_dir: PathBuf,
}

/// Creates the sandbox directories when PID 1 and returns the configuration.
pub fn prepare() -> Config {
    let pid1 = std::process::id() == 1;
    if pid1 {
        make_dirs();
    } else {
        become_subreaper();
    }
    let cwd = if Path::new(WORKSPACE).is_dir() {
        PathBuf::from(WORKSPACE)
    } else if pid1 {
        PathBuf::from("/")
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
    };
    Config {
        env: default_env(std::env::vars()),
        cwd,
        guest_dir: guest_dir(),
    }
}

/// The inherited environment with [`DEFAULT_ENV`] filled in where unset.
pub fn default_env(inherited: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = inherited.collect();
    for (k, v) in DEFAULT_ENV {
        env.entry((*k).to_string())
            .or_insert_with(|| (*v).to_string());
    }
    env
}

fn make_dirs() {
    if let Err(e) = std::fs::create_dir_all(WORKSPACE) {
        glog!("cannot create {WORKSPACE}: {e}");
    }
    if let Err(e) = std::fs::create_dir_all("/tmp") {
        glog!("cannot create /tmp: {e}");
    }
    if let Err(e) = std::fs::set_permissions("/tmp", std::fs::Permissions::from_mode(0o1777)) {
        glog!("cannot chmod /tmp: {e}");
    }
}

/// Outside a sandbox, orphans of our children are reparented to us, as they would be to PID 1,
/// so the reaper behaves the same in tests.
fn become_subreaper() {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes an integer flag and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

/// The directory of this binary: `/proc/self/exe`, else `argv[0]` (a chroot may lack /proc),
/// else `/.pandastack`.
fn guest_dir() -> PathBuf {
    let exe = std::env::current_exe().ok().or_else(|| {
        let argv0 = PathBuf::from(std::env::args_os().next()?);
        argv0.is_absolute().then_some(argv0)
    });
    exe.and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("/.pandastack"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_only_unset() {
        let env = default_env(vec![("PATH".to_string(), "/x".to_string())].into_iter());
        assert_eq!(env["PATH"], "/x");
        assert_eq!(env["HOME"], "/root");
        assert_eq!(env["MPLBACKEND"], "Agg");
    }
}
