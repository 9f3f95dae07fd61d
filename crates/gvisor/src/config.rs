//! The OCI runtime spec (`config.json`) of one instance.

use pandastack_engine::{SandboxSpec, VOLUMES_DIR};
use pandastack_guest_protocol::GUEST_PROCESS_RESERVE;
use serde_json::{json, Value};

/// Memory per process the sandbox's process limit allows for, MiB: [`nproc_limit`].
pub const MIB_PER_PROCESS: u32 = 4;
/// Fewest and most processes a sandbox may have ([`nproc_limit`]).
pub const NPROC_RANGE: (u64, u64) = (64, 1024);

/// The user process limit of a sandbox of `memory_mb` (`RLIMIT_NPROC` of what the guest
/// starts; the guest itself gets [`GUEST_PROCESS_RESERVE`] more, see [`render`]): one process per
/// [`MIB_PER_PROCESS`] MiB within [`NPROC_RANGE`] (128 for 512 MiB). A fork bomb hits it and
/// `fork` fails cleanly with EAGAIN (notes pitfall 9), and it stays within the sandbox's
/// memory (issue 8 point 3): a Python `os.fork()` loop costs ~2.4 MiB per process under
/// gVisor (measured: its copy-on-write pages), and its busy processes starve the guest's
/// memory guard, so the limit, not the guard, must stop it.
pub fn nproc_limit(memory_mb: u32) -> u64 {
    (u64::from(memory_mb) / u64::from(MIB_PER_PROCESS)).clamp(NPROC_RANGE.0, NPROC_RANGE.1)
}

/// Host pids-cgroup limit. ptrace costs several host tasks per guest process, so this is far
/// above [`nproc_limit`]; it only backstops a runaway sentry.
pub const HOST_PIDS_LIMIT: i64 = 8192;
/// Where the guest directory is mounted inside the sandbox.
pub const GUEST_MOUNT: &str = "/.pandastack";
/// Size of `/dev/shm` (a RAM tmpfs, as in Docker), bytes.
pub const DEV_SHM_BYTES: u64 = 64 * 1024 * 1024;
/// The guest daemon's path inside the sandbox.
pub const GUEST_BINARY: &str = "/.pandastack/pandastack-guest";

/// Capabilities of root in a template build sandbox: Docker's default set, which is what
/// `apt-get install`, `useradd` and `chown` in a Dockerfile `RUN` expect. User sandboxes get none.
pub const BUILD_CAPABILITIES: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_RAW",
    "CAP_SYS_CHROOT",
    "CAP_MKNOD",
    "CAP_AUDIT_WRITE",
    "CAP_SETFCAP",
];
/// Bumped whenever the mounts of [`render`] change: a checkpoint restores only onto the mount
/// layout it was taken with (a restore keeps the checkpoint's mount table), so images of an
/// older layout must not be used (docs/ARCHITECTURE.md "Volumes"). Also bumped when the
/// process limits change (a checkpoint keeps its processes' rlimits): `m3` made
/// `RLIMIT_NPROC` follow the memory size ([`nproc_limit`]).
/// `m4` gave the guest a process reserve above the user limit ([`GUEST_PROCESS_RESERVE`]).
/// `m5`: the container's stdout and stderr are a pipe the shim drains (issue 23 finding 3), no
/// longer the log file; a checkpoint keeps its host file descriptors' kind, so an older image
/// restored under the new shim had a PID 1 whose stderr writes failed.
pub const MOUNT_LAYOUT: &str = "disk-m5";

/// Renders the OCI config for `spec`. The cgroup path is relative (`pandastack/<id>`), which
/// runsc honours on these cgroup-v1 hosts (notes pitfall 12). `netns` is the network namespace
/// the sandbox joins (`/run/netns/...`), or `None` for a private, empty one (loopback only).
/// `staging` is the instance's volume staging directory, bound at `/mnt` with slave
/// propagation so that volumes bound into it later appear inside (`volumes.rs`); `None` (a
/// template build step, which writes its rootfs `/mnt` like any other directory) binds none.
pub fn render(
    spec: &SandboxSpec,
    netns: Option<&std::path::Path>,
    staging: Option<&std::path::Path>,
) -> Value {
    let memory_bytes = u64::from(spec.memory_mb) * 1024 * 1024;
    // The guest's limit: the user limit plus its reserve, which it lowers in its children.
    let nproc = nproc_limit(spec.memory_mb) + GUEST_PROCESS_RESERVE;
    let network_ns = match netns {
        Some(path) => json!({"type": "network", "path": path}),
        None => json!({"type": "network"}),
    };
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["ro", "nosuid", "noexec", "nodev"]}),
        json!({"destination": GUEST_MOUNT, "type": "bind", "source": spec.guest_dir, "options": ["rbind", "ro"]}),
    ];
    if spec.disk_mb.is_some() {
        // /tmp stays in the root overlay, on the instance's disk (instance_disk.rs), not in a
        // RAM tmpfs; /dev/shm is RAM, so it is bounded.
        mounts.push(json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "nodev", "mode=1777", format!("size={DEV_SHM_BYTES}")]}));
    }
    let mut config = json!({
        "ociVersion": "1.0.0",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": [GUEST_BINARY],
            "env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME=/root",
                "LANG=C.UTF-8"
            ],
            "cwd": "/",
            "rlimits": [
                {"type": "RLIMIT_NPROC", "hard": nproc, "soft": nproc},
                {"type": "RLIMIT_NOFILE", "hard": 65536, "soft": 65536}
            ]
        },
        "root": {"path": spec.rootfs, "readonly": false},
        "hostname": spec.hostname,
        "mounts": mounts,
        "linux": {
            "cgroupsPath": format!("pandastack/{}", spec.instance_id),
            "resources": {
                "memory": {"limit": memory_bytes},
                "cpu": {"quota": i64::from(spec.cpu.max(1)) * 100_000, "period": 100_000},
                "pids": {"limit": HOST_PIDS_LIMIT}
            },
            "namespaces": [
                {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, network_ns
            ]
        }
    });
    if let (Some(staging), Some(mounts)) = (staging, config["mounts"].as_array_mut()) {
        mounts.push(json!({
            "destination": VOLUMES_DIR, "type": "bind", "source": staging,
            "options": ["rbind", "rw", "rslave"]
        }));
    }
    if spec.template_build {
        let caps = json!(BUILD_CAPABILITIES);
        config["process"]["capabilities"] = json!({
            "bounding": caps, "effective": caps, "permitted": caps, "inheritable": caps
        });
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn limits_and_guest_mount_are_rendered() {
        let spec = SandboxSpec {
            instance_id: "ps-00".into(),
            dir: PathBuf::from("/d"),
            rootfs: PathBuf::from("/r"),
            guest_dir: PathBuf::from("/g"),
            cpu: 2,
            memory_mb: 512,
            hostname: "sandbox".into(),
            network: None,
            template_build: false,
            disk_mb: None,
            volumes: Vec::new(),
        };
        let staging = std::path::Path::new("/m/sandbox/ps-00");
        let v = render(&spec, None, Some(staging));
        assert_eq!(
            v["linux"]["resources"]["memory"]["limit"],
            512 * 1024 * 1024
        );
        assert_eq!(v["linux"]["resources"]["cpu"]["quota"], 200_000);
        assert_eq!(v["linux"]["cgroupsPath"], "pandastack/ps-00");
        assert_eq!(v["mounts"][3]["source"], "/g");
        assert_eq!(v["mounts"][3]["options"][1], "ro");
        assert_eq!(v["mounts"][4]["destination"], "/mnt");
        assert_eq!(v["mounts"][4]["source"], "/m/sandbox/ps-00");
        assert_eq!(v["mounts"][4]["options"][2], "rslave");
        // The user limit (128 at 512 MiB) plus the guest's reserve.
        assert_eq!(
            v["process"]["rlimits"][0]["hard"],
            128 + GUEST_PROCESS_RESERVE
        );
        assert_eq!(nproc_limit(128), 64);
        assert_eq!(nproc_limit(2048), 512);
        assert_eq!(nproc_limit(65536), 1024);
        assert_eq!(v["linux"]["namespaces"][4], json!({"type": "network"}));
        let joined = render(
            &spec,
            Some(std::path::Path::new("/run/netns/ps-abcdef-1")),
            Some(staging),
        );
        assert_eq!(
            joined["linux"]["namespaces"][4]["path"],
            "/run/netns/ps-abcdef-1"
        );
        assert!(v["process"].get("capabilities").is_none());
        assert_eq!(v["mounts"].as_array().unwrap().len(), 5);
        let build = render(
            &SandboxSpec {
                template_build: true,
                ..spec.clone()
            },
            None,
            None,
        );
        assert_eq!(
            build["process"]["capabilities"]["effective"][0],
            "CAP_CHOWN"
        );
        assert_eq!(
            build["mounts"].as_array().map(Vec::len),
            Some(4),
            "a build has no /mnt"
        );
        let with_disk = render(
            &SandboxSpec {
                disk_mb: Some(256),
                ..spec
            },
            None,
            Some(staging),
        );
        let mounts = with_disk["mounts"].as_array().unwrap();
        assert_eq!(mounts.len(), 6);
        assert!(mounts.iter().all(|m| m["destination"] != "/tmp"));
        assert_eq!(mounts[4]["destination"], "/dev/shm");
        assert_eq!(mounts[4]["options"][3], format!("size={DEV_SHM_BYTES}"));
        assert_eq!(mounts[5]["destination"], "/mnt", "volumes after /dev/shm");
    }
}
