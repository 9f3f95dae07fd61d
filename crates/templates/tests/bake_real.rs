//! Real bakes with mmdebstrap. They need root, `mmdebstrap`, `chroot` and
//! network access to Debian's archive (and PyPI for code-interpreter), and take
//! about a minute each, so each runs only when `PANDASTACK_REAL_BAKE_TESTS` names
//! it (`base`, `code-interpreter`, comma-separated, or `all`) and otherwise prints
//! why it did nothing. scripts/test.sh runs `base` (~35 s); the code-interpreter
//! bake runs for real in test.sh's bake phase.
//!
//! ```text
//! sudo PANDASTACK_REAL_BAKE_TESTS=all cargo test -p pandastack-templates --test bake_real -- --nocapture
//! ```
//!
//! `PANDASTACK_TEMPLATES_TEST_DIR` picks the scratch directory (default: the
//! system temp dir); it must not be on a `nodev`/`noexec` mount.

use std::path::PathBuf;
use std::time::Instant;

use pandastack_templates::{TemplateInfo, TemplateStore};

/// True when `PANDASTACK_REAL_BAKE_TESTS` asks for a real bake of `name`.
fn wanted(name: &str) -> bool {
    let list = std::env::var("PANDASTACK_REAL_BAKE_TESTS").unwrap_or_default();
    let on = list
        .split(',')
        .any(|n| n.trim() == name || n.trim() == "all");
    if !on {
        println!("real bake of {name} not requested (PANDASTACK_REAL_BAKE_TESTS)");
    }
    on
}

fn scratch(label: &str) -> PathBuf {
    let base = std::env::var_os("PANDASTACK_TEMPLATES_TEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("pandastack-bake-{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test needs root (mmdebstrap and chroot)");
}

fn bake(name: &str) -> (TemplateStore, TemplateInfo, PathBuf) {
    require_root();
    let root = scratch(name);
    let store = TemplateStore::new(root.join("templates"));
    let started = Instant::now();
    let info = store
        .bake_builtin(name, false, &mut |line| eprintln!("[{name}] {line}"))
        .expect("bake succeeds");
    eprintln!(
        "baked {name} in {:.1} s, rootfs {} MB",
        started.elapsed().as_secs_f64(),
        info.size_bytes / 1_000_000
    );
    (store, info, root)
}

fn check_common(info: &TemplateInfo) {
    let rootfs = &info.rootfs;
    let bash = std::fs::metadata(rootfs.join("usr/bin/bash")).unwrap();
    assert!(bash.is_file());
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&bash),
        0,
        "owned by root"
    );
    assert!(rootfs.join("bin/bash").exists());
    assert!(rootfs.join("usr/bin/python3").exists());
    for dir in ["workspace", "data", "home/panda", ".pandastack"] {
        assert!(rootfs.join(dir).is_dir(), "{dir} missing");
    }
    let tmp_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(rootfs.join("tmp")).unwrap().permissions(),
    );
    assert_eq!(tmp_mode & 0o7777, 0o1777);
    assert_eq!(
        std::fs::read_to_string(rootfs.join("etc/hostname")).unwrap(),
        "sandbox\n"
    );
    assert!(std::fs::read_to_string(rootfs.join("etc/hosts"))
        .unwrap()
        .contains("127.0.0.1 localhost sandbox"));
    let lists = std::fs::read_dir(rootfs.join("var/lib/apt/lists")).map(|d| {
        d.filter_map(Result::ok)
            .filter(|e| e.path().is_file() && e.file_name() != "lock")
            .count()
    });
    assert_eq!(lists.unwrap_or(0), 0, "apt lists removed");
    assert_eq!(info.generation, 1);
    assert!(info.size_bytes > 50_000_000);
}

#[test]
fn bake_base_for_real() {
    if !wanted("base") {
        return;
    }
    let (store, info, root) = bake("base");
    check_common(&info);
    let again = store
        .bake_builtin("base", false, &mut |_| {})
        .expect("cache hit");
    assert_eq!(again.build_id, info.build_id);
    std::fs::remove_dir_all(root).expect("clean up");
}

#[test]
fn bake_code_interpreter_for_real() {
    if !wanted("code-interpreter") {
        return;
    }
    let (_store, info, root) = bake("code-interpreter");
    check_common(&info);
    let site = info
        .rootfs
        .join("usr/local/lib/python3.11/dist-packages/kaleido");
    assert!(
        site.is_dir(),
        "kaleido installed from the host-downloaded wheel"
    );
    assert!(!info.rootfs.join("tmp/pandastack-wheels").exists());
    std::fs::remove_dir_all(root).expect("clean up");
}
