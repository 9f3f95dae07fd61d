//! The sandbox engine trait: what an isolation engine must provide to run PandaStack sandboxes.
//!
//! The server owns everything above the engine (state machine, store, API); an engine only turns
//! a [`SandboxSpec`] into a running *instance* and back. An instance is one incarnation of a
//! sandbox: a cold boot, a restore from a snapshot, a wake from hibernation or a fork child each
//! make a new instance (with a new [`InstanceId`]); the sandbox id the user sees stays stable
//! across hibernate/wake.
//!
//! Every instance exposes the guest daemon's channel as a host unix socket
//! ([`Instance::guest_socket`]) speaking `pandastack-guest-protocol`. gVisor implements this trait
//! in `pandastack-gvisor`; a Firecracker engine for KVM hosts would implement it with a vsock
//! bridge instead, without touching the API layer.

pub mod demand;
mod network;
mod volume;

pub use network::{
    EgressRule, EgressRuleError, InstanceNetwork, NetworkPolicy, DNS_ADDR, GATEWAY_ADDR,
    GUEST_ADDR, GUEST_NET, GUEST_PREFIX,
};
pub use volume::{VolumeMount, VolumeUsage, VOLUMES_DIR};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// Engine-level id of one instance: `ps-` followed by 32 lowercase hex digits (fixed length, so
/// runsc's prefix matching of container ids can never pick the wrong one; notes, pitfall 3).
pub type InstanceId = String;

/// Everything an engine needs to start an instance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// The instance id to use (see [`instance_id_from`]).
    pub instance_id: InstanceId,
    /// Host directory owned by this instance: bundle, overlay, sockets, logs. Created by the
    /// engine, removed by [`Engine::destroy`].
    pub dir: PathBuf,
    /// Template root filesystem, shared read-only between sandboxes.
    pub rootfs: PathBuf,
    /// Host directory with the guest daemon and its kernel driver, mounted read-only at
    /// `/.pandastack` in the sandbox.
    pub guest_dir: PathBuf,
    /// CPU quota in whole CPUs.
    pub cpu: u32,
    /// Memory limit in MiB.
    pub memory_mb: u32,
    /// Hostname inside the sandbox.
    pub hostname: String,
    /// The instance's network and its egress policy; `None`: loopback only.
    pub network: Option<NetworkPolicy>,
    /// True for the sandbox of a template build step: it writes straight into `rootfs` (a
    /// private copy the build owns, with no overlay in between, so the directory *is* the
    /// result) and its root user has the capabilities a container's root usually has (chown,
    /// setuid, ...), so package managers and `useradd` work. False for every user sandbox.
    #[serde(default)]
    pub template_build: bool,
    /// Size of the instance's disk, MiB: its writable root and `/tmp` live on a disk of this
    /// size and writes past it fail with ENOSPC inside the sandbox (issue 8). `None`: the
    /// layout of instances made before disks existed (an unlimited overlay, `/tmp` in RAM);
    /// a restore must use the layout its image was taken with.
    #[serde(default)]
    pub disk_mb: Option<u32>,
    /// Volumes attached from the start (before the first process runs, or before a restore
    /// loads its image), at `/mnt/{name}`.
    #[serde(default)]
    pub volumes: Vec<VolumeMount>,
}

/// A started instance. A restore may land on a container the engine made in advance
/// ([`Engine::keep_targets`]): then `instance_id` and `dir` are that container's, not the
/// spec's, and the caller records these.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instance {
    pub instance_id: InstanceId,
    /// The instance's directory.
    pub dir: PathBuf,
    /// Host unix socket that reaches the guest daemon.
    pub guest_socket: PathBuf,
    /// The instance's network, when its spec asked for one.
    pub network: Option<InstanceNetwork>,
}

/// What a restore target (a container made in advance) shares with every checkpoint restored
/// onto it: a checkpoint restores only onto the rootfs, guest directory, resources and network
/// mode it was taken with (issue 11).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetClass {
    pub rootfs: PathBuf,
    pub guest_dir: PathBuf,
    /// Whole CPUs.
    pub cpu: u32,
    /// MiB.
    pub memory_mb: u32,
    /// The policy targets are made with (`None`: no network); a restore under another policy
    /// gets its own applied when it takes the target.
    pub network: Option<NetworkPolicy>,
    /// The target's disk, MiB (made with it, ahead of time); `None`: the layout without one.
    pub disk_mb: Option<u32>,
}

impl TargetClass {
    /// The class a restore of `spec` needs.
    pub fn of(spec: &SandboxSpec) -> Self {
        TargetClass {
            rootfs: spec.rootfs.clone(),
            guest_dir: spec.guest_dir.clone(),
            cpu: spec.cpu,
            memory_mb: spec.memory_mb,
            network: spec.network.clone(),
            disk_mb: spec.disk_mb,
        }
    }

    /// True when a target of this class can take a restore of `other` (the same everything
    /// but the policy, which can be replaced).
    pub fn fits(&self, other: &TargetClass) -> bool {
        self.rootfs == other.rootfs
            && self.guest_dir == other.guest_dir
            && self.cpu == other.cpu
            && self.memory_mb == other.memory_mb
            && self.network.is_some() == other.network.is_some()
            && self.disk_mb == other.disk_mb
    }
}

/// What the engine knows of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstanceStatus {
    Running,
    Paused,
    /// Exists but its processes are gone.
    Stopped,
    /// The engine has no such instance.
    Missing,
}

/// How an instance's processes ended ([`Engine::exit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceExit {
    /// The exit code of the engine's process for the instance (128 + signal when killed).
    pub code: i32,
    /// The host killed it for going over its memory limit (its cgroup's OOM killer).
    pub out_of_memory: bool,
}

/// Resource use of an instance, from its cgroups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceStats {
    /// Resident memory in bytes (cgroup RSS + page cache charged to it).
    pub memory_bytes: u64,
    /// CPU time consumed since start, ns.
    pub cpu_ns: u64,
}

/// What became of a checkpoint, as start-up recovery finds it ([`Engine::checkpoint_outcome`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckpointOutcome {
    /// The image is whole: the checkpoint finished successfully.
    Complete,
    /// The checkpoint finished and failed (the detail says why); the image is unusable.
    Failed(String),
    /// A checkpoint process is still writing the image.
    Running,
    /// Nothing is writing and there is no proof of completion: a torn image.
    Incomplete,
}

/// Errors of an engine operation. Messages are safe to show API clients: they name the
/// operation and instance, never host paths.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("instance {0} not found")]
    NotFound(InstanceId),
    #[error("{op} of instance {id} failed: {detail}")]
    Failed {
        op: &'static str,
        id: InstanceId,
        detail: String,
    },
    #[error("engine i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// An isolation engine. All methods are safe to call concurrently for different instances.
#[async_trait]
pub trait Engine: Send + Sync + 'static {
    /// Short engine name for logs and metrics, e.g. `"gvisor"`.
    fn name(&self) -> &'static str;

    /// A tag of the instance layout checkpoints depend on (for gVisor: the mounts of every
    /// container). An image restores only onto the layout it was taken with, so images kept
    /// across server versions (template images) are keyed by it.
    fn image_layout(&self) -> &'static str;

    /// Boots a fresh instance from the template rootfs. Returns once the guest socket exists
    /// (the guest may still be starting; the caller handshakes). On error nothing is left.
    async fn boot(&self, spec: &SandboxSpec) -> Result<Instance, EngineError>;

    /// Starts a new instance from a checkpoint image written by [`Engine::checkpoint`]. The
    /// spec's rootfs and guest_dir must be those the image was taken with.
    async fn restore(&self, spec: &SandboxSpec, image: &Path) -> Result<Instance, EngineError>;

    /// Writes memory, processes and the root overlay of a running instance to `image` (a
    /// directory). With `leave_running` the instance continues; otherwise it stops. The
    /// checkpoint runs to its end even if the caller's process dies meanwhile, and leaves proof
    /// of its outcome for [`Engine::checkpoint_outcome`].
    async fn checkpoint(
        &self,
        id: &str,
        image: &Path,
        leave_running: bool,
    ) -> Result<(), EngineError>;

    /// What became of a checkpoint into `image` that may have been interrupted (the server
    /// died while it ran): whether the image is complete, failed, still being written, or torn.
    fn checkpoint_outcome(&self, image: &Path) -> CheckpointOutcome;

    /// Stops every process of the instance from being scheduled; memory is kept.
    async fn pause(&self, id: &str) -> Result<(), EngineError>;

    /// Undoes [`Engine::pause`].
    async fn resume(&self, id: &str) -> Result<(), EngineError>;

    /// Kills the instance and removes everything it held on the host (processes, cgroups,
    /// its directory). Idempotent: destroying a missing instance succeeds.
    async fn destroy(&self, id: &str, dir: &Path) -> Result<(), EngineError>;

    /// The instance's current status.
    async fn status(&self, id: &str) -> Result<InstanceStatus, EngineError>;

    /// Current resource use.
    async fn stats(&self, id: &str) -> Result<InstanceStats, EngineError>;

    /// How the instance in `dir` ended, once its processes are gone by themselves (the
    /// sandbox died: out of memory, a crash); `None` while it runs, and for an instance this
    /// engine stopped on purpose (destroy, a checkpoint that leaves it stopped) if the engine
    /// can tell. Cheap (a file read): the server asks it of every running sandbox several
    /// times a second (issue 8: a dead sandbox is marked `failed` within 2 s).
    fn exit(&self, id: &str, dir: &Path) -> Option<InstanceExit>;

    /// Bytes used and size of the disk of the instance in `dir`, when it has one.
    fn disk_usage(&self, dir: &Path) -> Option<(u64, u64)>;

    /// Instance ids the engine knows of (running or not), for adoption after a restart and
    /// for destroying orphans.
    async fn list(&self) -> Result<Vec<InstanceId>, EngineError>;

    /// Replaces the egress policy of a running networked instance (a warm-pool instance
    /// claimed by a create that asked for another policy). Takes effect for new flows at once.
    ///
    /// # Errors
    /// [`EngineError::NotFound`] when the instance has no network; `Failed` when the host's
    /// firewall refuses the rules.
    async fn set_network_policy(&self, id: &str, policy: &NetworkPolicy)
        -> Result<(), EngineError>;

    /// Host services (issue 10: the database front end): makes the host reachable from every
    /// networked sandbox at [`GATEWAY_ADDR`] and returns that address, so a service can listen
    /// on it. Only the ports given to [`Engine::set_host_service_ports`] are open to
    /// sandboxes. Idempotent. `None` when instances have no network.
    ///
    /// # Errors
    /// `Failed` when the host refuses the address.
    async fn host_service_addr(&self) -> Result<Option<Ipv4Addr>, EngineError>;

    /// Replaces the set of TCP ports on [`Engine::host_service_addr`] that every networked
    /// sandbox may connect to, whatever its egress policy (the service itself decides whom it
    /// serves). Takes effect for new connections at once; kept across [`Engine::recover`].
    ///
    /// # Errors
    /// `Failed` when the host's firewall refuses the rules; the previous set stays in force.
    async fn set_host_service_ports(&self, ports: &[u16]) -> Result<(), EngineError>;
    /// Attaches `volumes` to the running instance `id` (directory `dir`): each appears at
    /// `/mnt/{name}` at once. All or nothing: on error none of them is attached.
    ///
    /// # Errors
    /// `Failed` when an image cannot be mounted, or is already attached read-write to another
    /// instance (or read-only elsewhere while this asks read-write).
    async fn attach_volumes(
        &self,
        id: &str,
        dir: &Path,
        volumes: &[VolumeMount],
    ) -> Result<(), EngineError>;

    /// Detaches every volume of instance `id` so that its images are free when this returns:
    /// the instance's processes are stopped first (it cannot be used afterwards; destroy it as
    /// usual), then everything it wrote reaches the image, which is closed cleanly unless
    /// another instance still has it attached read-only. [`Engine::destroy`] does this too;
    /// call this first when a volume must be free at once (a kill), since a destroy may take
    /// seconds. Idempotent.
    ///
    /// # Errors
    /// `Failed` when an image stays busy (it is then detached lazily, as soon as the last file
    /// on it closes).
    async fn release_volumes(&self, id: &str, dir: &Path) -> Result<(), EngineError>;

    /// Makes `image` an empty volume of `size_mb` MiB (a sparse file: the host pays only for
    /// what is written), replacing any file there.
    ///
    /// # Errors
    /// `Failed` when the file cannot be made or formatted (nothing is left).
    async fn format_volume(&self, image: &Path, size_mb: u32) -> Result<(), EngineError>;

    /// Grows the detached volume `image` to `size_mb` MiB; its files are kept.
    ///
    /// # Errors
    /// `Failed` when the image is attached, or the filesystem cannot be grown (it is then
    /// left at its old size).
    async fn grow_volume(&self, image: &Path, size_mb: u32) -> Result<(), EngineError>;

    /// Space used in the volume `image`: live when it is attached, else as it was closed.
    ///
    /// # Errors
    /// `Io` when the image cannot be read.
    async fn volume_usage(&self, image: &Path) -> Result<VolumeUsage, EngineError>;

    /// Start-up recovery of host-wide engine state: called once, before serving, with every
    /// instance the server keeps (`(id, dir)`). The engine rebuilds what those need (firewall
    /// rules) and removes everything else it owns that a crash left behind (network
    /// namespaces, links, rules, volume mounts), without touching anything that is not its
    /// own. Volumes of kept instances stay attached (mounted again if a mount went missing).
    async fn recover(&self, keep: &[(InstanceId, PathBuf)]) -> Result<(), EngineError>;

    /// Keeps containers of `class` made in advance, so [`Engine::restore`] of a matching spec
    /// lands on one at once instead of making its container (~100-150 ms here): at least
    /// `least`, and up to `most` while restores come in bursts (the largest number that asked
    /// for one within 5 s over the last 5 minutes; [`demand::Bursts`]). Replenished in the
    /// background; `least` and `most` 0 stop it (made ones are destroyed).
    fn keep_targets(&self, class: TargetClass, least: usize, most: usize);

    /// Destroys containers made in advance beyond what recent demand keeps (a burst has aged
    /// out; see [`Engine::keep_targets`]). Called by the server's sweeper now and then.
    /// Engines without targets do nothing.
    fn trim_targets(&self) {}

    /// Makes containers of `class` now, at once, so that `count` restores about to come (a
    /// fork tree's children) each land on one: the ones the ready stock lacks, on top of what
    /// [`Engine::keep_targets`] keeps, when they are at most `at_most` (more restores than
    /// that share the cores anyway, and containers made beside them only slow them down);
    /// returns when they are made (issue 11 point 3). Ones no restore takes (the fork failed)
    /// stay in the stock for later restores and go at shutdown like the rest. Best effort: a
    /// container that cannot be made is logged, and its restore makes its own. Engines
    /// without targets do nothing.
    async fn make_targets(&self, class: TargetClass, count: usize, at_most: usize) {
        let _ = (class, count, at_most);
    }

    /// Host memory instance `id` uses now as the host's limit counts it (the gVisor engine:
    /// its memory cgroup's `memory.usage_in_bytes`), bytes; cheap enough to ask every 100 ms
    /// for every instance (the server's memory watch). None when the engine cannot tell: the
    /// guest's memory guard then keeps looking for itself.
    fn memory_used(&self, id: &str) -> Option<u64> {
        let _ = id;
        None
    }

    /// Containers the engine holds made in advance (ready or being made), for metrics and
    /// leak checks.
    fn targets_held(&self) -> usize;

    /// Containers made in advance that are ready to take a restore now (not counting those
    /// still being made).
    fn targets_ready(&self) -> usize;

    /// Graceful stop of the server, after it destroyed its own transient instances (the warm
    /// pool): the engine drops what it made ahead of time and, when no instance lives on
    /// (`instances_remain` false), its host-wide state too (firewall table). Instances that
    /// live on keep everything they need.
    async fn shutdown(&self, instances_remain: bool);
}

/// Makes a new random [`InstanceId`] from 16 random bytes given by the caller.
pub fn instance_id_from(bytes: [u8; 16]) -> InstanceId {
    let mut s = String::with_capacity(35);
    s.push_str("ps-");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn instance_ids_have_fixed_length() {
        let id = super::instance_id_from([0xab; 16]);
        assert_eq!(id.len(), 35);
        assert!(id.starts_with("ps-abab"));
    }
}
