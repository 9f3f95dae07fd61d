//! Reads an instance's resource use from its cgroup-v1 controllers.

use pandastack_engine::InstanceStats;
use std::path::Path;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// RSS (memory.stat `total_rss`, falling back to `memory.usage_in_bytes`) and CPU time
/// (cpuacct.usage, ns) of cgroup `pandastack/<id>`. Missing files read as zero.
pub fn stats(id: &str) -> InstanceStats {
    let mem_dir = Path::new(CGROUP_ROOT).join("memory/pandastack").join(id);
    let rss = std::fs::read_to_string(mem_dir.join("memory.stat"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("total_rss ")
                    .and_then(|v| v.trim().parse().ok())
            })
        });
    let memory_bytes = rss
        .or_else(|| read_u64(&mem_dir.join("memory.usage_in_bytes")))
        .unwrap_or(0);
    let cpu_ns = read_u64(
        &Path::new(CGROUP_ROOT)
            .join("cpuacct/pandastack")
            .join(id)
            .join("cpuacct.usage"),
    )
    .unwrap_or(0);
    InstanceStats {
        memory_bytes,
        cpu_ns,
    }
}

/// Removes the instance's cgroup directories that runsc left behind (they are empty once its
/// processes are gone; rmdir of a busy one fails harmlessly).
pub fn remove(id: &str) {
    for ctrl in [
        "memory", "cpu", "cpuacct", "pids", "cpuset", "devices", "freezer", "blkio", "systemd",
    ] {
        let _ = std::fs::remove_dir(
            Path::new(CGROUP_ROOT)
                .join(ctrl)
                .join("pandastack")
                .join(id),
        );
    }
}
