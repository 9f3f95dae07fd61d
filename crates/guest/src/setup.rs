//! Start-up: the directories and default environment every sandbox process gets.
//!
//! As PID 1 the guest creates `/workspace` and `/tmp` (mode 1777) and reads the template's
//! runtime defaults ([`TEMPLATE_RUNTIME_PATH`]: `ENV` and `WORKDIR` of a Dockerfile-built
//! template). Run as an ordinary process (tests on a host) it changes nothing on the filesystem,
//! reads no template file and uses `/workspace` only if it already exists, else its own current
//! directory.

use pandastack_guest_protocol::{TemplateRuntime, DEFAULT_ENV, TEMPLATE_RUNTIME_PATH};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Default directory of commands, kernels and relative paths.
pub const WORKSPACE: &str = "/workspace";

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
    let runtime = if pid1 {
        make_dirs();
        read_runtime(Path::new(TEMPLATE_RUNTIME_PATH))
    } else {
        become_subreaper();
        TemplateRuntime::default()
    };
    let workdir = runtime
        .workdir
        .as_deref()
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && d.is_dir());
    let cwd = if let Some(dir) = workdir {
        dir
    } else if Path::new(WORKSPACE).is_dir() {
        PathBuf::from(WORKSPACE)
    } else if pid1 {
        PathBuf::from("/")
    } else {
        std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
    };
    let mut env = default_env(std::env::vars());
    env.extend(runtime.env);
    Config {
        env,
        cwd,
        guest_dir: guest_dir(),
    }
}

/// The template's runtime defaults at `path`; none when the file is missing, and none (with a
/// log line) when it is unreadable or not the expected JSON: a broken file must not stop the
/// sandbox from serving.
fn read_runtime(path: &Path) -> TemplateRuntime {
    match std::fs::read(path) {
        Ok(bytes) => parse_runtime(&bytes).unwrap_or_else(|e| {
            glog!("ignoring {}: {e}", path.display());
            TemplateRuntime::default()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => TemplateRuntime::default(),
        Err(e) => {
            glog!("cannot read {}: {e}", path.display());
            TemplateRuntime::default()
        }
    }
}

/// Parses a template runtime file, dropping variables no process could receive (empty names,
/// `=` in a name, NUL anywhere).
fn parse_runtime(bytes: &[u8]) -> Result<TemplateRuntime, serde_json::Error> {
    let mut rt: TemplateRuntime = serde_json::from_slice(bytes)?;
    rt.env
        .retain(|k, v| !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0'));
    Ok(rt)
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

    #[test]
    fn runtime_file_drops_unusable_variables() {
        let rt =
            parse_runtime(br#"{"env":{"A":"1","":"x","B=C":"y","D":"a\u0000b"},"workdir":"/app"}"#)
                .expect("parses");
        assert_eq!(rt.env.len(), 1);
        assert_eq!(rt.env["A"], "1");
        assert_eq!(rt.workdir.as_deref(), Some("/app"));
        assert!(parse_runtime(b"[1]").is_err());
    }
}
