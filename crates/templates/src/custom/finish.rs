//! The last touches every user-built rootfs gets, and what the server needs to know about it.
//!
//! The mount points the runtime uses must be directories (`/.pandastack` for the guest daemon,
//! `/proc`, `/sys`, `/dev`, and `/tmp` with mode 1777). Anything else at those paths (a symlink,
//! a file) is replaced inside the root, never followed: the runtime later writes into `/tmp`
//! on the host (its marker file), and a tar's `tmp -> /tmp/x` must not send that write out of
//! the rootfs (issue 23 finding 4). The template's
//! runtime defaults (`ENV`, `WORKDIR`) are written to [`TEMPLATE_RUNTIME_PATH`], which the guest
//! reads at start. The probes tell the server whether code contexts can work (python3) and
//! whether the template snapshot should hold a warmed kernel (IPython, pandas).

use super::in_root::InRoot;
use pandastack_guest_protocol::{TemplateRuntime, TEMPLATE_RUNTIME_PATH};
use serde::{Deserialize, Serialize};
use std::io::{self, Write};

/// What a finished rootfs contains, as far as the server cares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probes {
    /// `python3` is an executable in `/usr/bin`, `/usr/local/bin` or `/bin`.
    pub python: bool,
    /// The `IPython` package is importable from a standard location.
    pub ipython: bool,
    /// The `pandas` package is too (the template snapshot then imports it ahead of time).
    pub pandas: bool,
}

/// Mount points, the runtime file (when `runtime` sets anything) and the probes.
///
/// # Errors
/// I/O errors writing into the rootfs.
pub fn finish(root: &InRoot, runtime: &TemplateRuntime) -> io::Result<Probes> {
    root.ensure_dir("/.pandastack", 0o755)?;
    for dir in ["/proc", "/sys", "/dev"] {
        root.ensure_dir(dir, 0o555)?;
    }
    // A real `/tmp` keeps its mode; a missing or symlinked one becomes a 1777 directory.
    root.ensure_dir("/tmp", 0o1777)?;
    if *runtime != TemplateRuntime::default() {
        let json = serde_json::to_vec_pretty(runtime).map_err(io::Error::other)?;
        let mut f = root.create_file(TEMPLATE_RUNTIME_PATH, 0o644, Some((0, 0)))?;
        f.write_all(&json)?;
    }
    Ok(probe(root))
}

/// Looks for python3, IPython and pandas without running anything.
pub fn probe(root: &InRoot) -> Probes {
    let python = ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .iter()
        .any(|p| root.is_executable(p));
    let has = |module: &str| {
        site_dirs(root)
            .iter()
            .any(|d| root.is_dir(&format!("{d}/{module}")))
    };
    Probes {
        python,
        ipython: python && has("IPython"),
        pandas: python && has("pandas"),
    }
}

/// Directories python3 imports packages from on Debian and in python.org / Alpine builds.
fn site_dirs(root: &InRoot) -> Vec<String> {
    let mut dirs = vec!["/usr/lib/python3/dist-packages".to_string()];
    for lib in ["/usr/lib", "/usr/local/lib"] {
        for name in root.list(lib) {
            if name.starts_with("python3") {
                dirs.push(format!("{lib}/{name}/dist-packages"));
                dirs.push(format!("{lib}/{name}/site-packages"));
            }
        }
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn mount_points_runtime_and_probes() {
        let tmp = TempDir::new("finish");
        let r = tmp.path();
        std::fs::create_dir_all(r.join("usr/bin")).unwrap();
        std::fs::create_dir_all(r.join("usr/local/lib/python3.12/site-packages/IPython")).unwrap();
        std::fs::write(r.join("usr/bin/python3.12"), "").unwrap();
        std::fs::set_permissions(
            r.join("usr/bin/python3.12"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("python3.12", r.join("usr/bin/python3")).unwrap();
        std::os::unix::fs::symlink("/etc", r.join(".pandastack")).unwrap();
        // issue 23 finding 4: a `/tmp` pointing at a host path is replaced, not followed.
        let host = TempDir::new("finish-host-tmp");
        std::os::unix::fs::symlink(host.path(), r.join("tmp")).unwrap();
        let root = InRoot::open(r).unwrap();
        let rt = TemplateRuntime {
            workdir: Some("/app".into()),
            ..Default::default()
        };
        let p = finish(&root, &rt).unwrap();
        assert_eq!(
            p,
            Probes {
                python: true,
                ipython: true,
                pandas: false
            }
        );
        assert!(r.join(".pandastack").is_dir() && !r.join(".pandastack").is_symlink());
        assert!(r.join("tmp").is_dir() && !r.join("tmp").is_symlink());
        assert_eq!(std::fs::read_dir(host.path()).unwrap().count(), 0);
        assert_eq!(
            std::fs::metadata(r.join("tmp"))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777,
            0o1777
        );
        let written: TemplateRuntime =
            serde_json::from_slice(&std::fs::read(r.join("etc/pandastack/template.json")).unwrap())
                .unwrap();
        assert_eq!(written, rt);

        let empty = TempDir::new("finish-empty");
        let root = InRoot::open(empty.path()).unwrap();
        assert_eq!(
            finish(&root, &TemplateRuntime::default()).unwrap(),
            Probes::default()
        );
        assert!(!empty.path().join("etc").exists());
    }
}
