//! [`GvisorEngine`]: the [`Engine`] implementation over runsc and the shim.

use crate::instance_disk::{self, DiskConfig, Disks};
use crate::net::{InstanceNet, NetConfig, Networks, Slot};
use crate::runsc::Runsc;
use crate::shim::ControlRequest;
use crate::targets::{Target, Targets};
use crate::volumes::Volumes;
use crate::{cgroup, checkpoint, config, disk};
use async_trait::async_trait;
use pandastack_engine::{
    instance_id_from, CheckpointOutcome, Engine, EngineError, Instance, InstanceExit, InstanceId,
    InstanceStats, InstanceStatus, NetworkPolicy, SandboxSpec, TargetClass, VolumeMount,
    VolumeUsage,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// How long a boot or restore may take until the guest socket appears.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Settings of the gVisor engine.
#[derive(Debug, Clone)]
pub struct GvisorConfig {
    /// The runsc binary (`runsc` from bookworm-backports).
    pub runsc: PathBuf,
    /// runsc's state root, e.g. `<data_dir>/runsc`.
    pub state_root: PathBuf,
    /// `ptrace` (default) or `systrap`. Restores must use the platform of the checkpoint.
    pub platform: String,
    /// The program and leading arguments that start a shim, e.g. `[<pandastack>, "shim"]`.
    pub shim_command: Vec<String>,
    /// Sandbox networking on this host; `None`: every instance gets loopback only and a spec
    /// that asks for a network is refused.
    pub network: Option<NetConfig>,
    /// Where the engine puts the directories of containers it makes on its own (restore
    /// targets), normally the server's `<data_dir>/instances`.
    pub instances_dir: PathBuf,
    /// Spare disks made ahead of time; `None`: disks are formatted when an instance needs one.
    pub disks: Option<DiskConfig>,
    /// Where volumes are mounted on the host and staged for instances (`volumes.rs`),
    /// normally `<data_dir>/mounts`. Made a shared mount point.
    pub mounts_dir: PathBuf,
    /// Where the volume images live (the server's `<data_dir>/volumes`): start-up recovery
    /// detaches loop devices of images there that nothing mounts.
    pub volumes_dir: PathBuf,
}

/// The longest path a unix socket address holds (`sun_path` is 108 bytes with its NUL; unix(7)).
const MAX_SOCKET_PATH: usize = 107;

/// Checks that the sockets of every instance under `instances_dir` (`<dir>/<instance id>/
/// control.sock`, the longest of them) fit in a unix socket address. A longer one makes the
/// shim's bind fail inside the sandbox's start, which the server would only see as a boot that
/// never answers, so a too-deep data dir is refused at start-up instead.
///
/// # Errors
/// [`EngineError::Failed`] naming the length and the limit.
fn check_socket_paths(instances_dir: &Path) -> Result<(), EngineError> {
    let longest = instances_dir
        .join(pandastack_engine::instance_id_from([0; 16]))
        .join("control.sock");
    let len = longest.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(EngineError::Failed {
            op: "socket path",
            id: "-".into(),
            detail: format!(
                "the data dir is too deep: an instance socket path would be {len} bytes, \
                 a unix socket address holds {MAX_SOCKET_PATH}; use a data dir at least {} bytes shorter",
                len - MAX_SOCKET_PATH
            ),
        });
    }
    Ok(())
}

/// The gVisor engine. Cheap to clone.
#[derive(Clone)]
pub struct GvisorEngine {
    runsc: Runsc,
    shim_command: Vec<String>,
    net: Option<Arc<Networks>>,
    disks: Disks,
    /// Slot and directory of every networked instance this process knows.
    slots: Arc<Mutex<HashMap<InstanceId, (Slot, PathBuf)>>>,
    /// Containers made in advance for restores.
    targets: Arc<Targets>,
    /// The memory cgroup usage file of each instance [`Engine::memory_used`] was asked about
    /// (found once: finding it takes several reads).
    memory_files: Arc<Mutex<HashMap<InstanceId, PathBuf>>>,
    instances_dir: PathBuf,
    volumes_dir: PathBuf,
    volumes: Arc<Volumes>,
}

impl GvisorEngine {
    /// Creates the engine and its state root.
    ///
    /// # Errors
    /// I/O errors creating the state root or the volume mounts' root;
    /// [`EngineError::Failed`] (op `socket path`) when the instances dir is so deep that an
    /// instance's sockets would not fit in a unix socket address: every boot would then wait
    /// out [`START_TIMEOUT`] and fail.
    pub fn new(cfg: GvisorConfig) -> Result<Self, EngineError> {
        check_socket_paths(&cfg.instances_dir)?;
        std::fs::create_dir_all(&cfg.state_root)?;
        let volumes = Arc::new(Volumes::new(cfg.mounts_dir)?);
        let net = cfg
            .network
            .map(Networks::start)
            .transpose()
            .map_err(|detail| EngineError::Failed {
                op: "network setup",
                id: "-".into(),
                detail,
            })?;
        Ok(GvisorEngine {
            runsc: Runsc {
                binary: cfg.runsc,
                root: cfg.state_root,
                platform: cfg.platform,
            },
            shim_command: cfg.shim_command,
            net,
            disks: Disks::new(cfg.disks),
            slots: Arc::default(),
            targets: Arc::default(),
            memory_files: Arc::default(),
            instances_dir: cfg.instances_dir,
            volumes_dir: cfg.volumes_dir,
            volumes,
        })
    }

    /// The sandbox network of this host, when networking is on.
    pub fn networks(&self) -> Option<&Arc<Networks>> {
        self.net.as_ref()
    }

    fn socket(dir: &Path) -> PathBuf {
        dir.join("guest.sock")
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<InstanceId, (Slot, PathBuf)>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the bundle, makes the volume staging directory with the spec's volumes and, for
    /// a networked spec, takes a network slot (recorded in `net.json` so [`Engine::destroy`]
    /// and a restarted server find it).
    async fn prepare(&self, spec: &SandboxSpec) -> Result<Option<InstanceNet>, EngineError> {
        std::fs::create_dir_all(spec.dir.join("bundle"))?;
        match spec.disk_mb {
            Some(mb) => {
                instance_disk::keep_tmp_in_root(&spec.rootfs)?;
                let (disks, dir) = (self.disks.clone(), spec.dir.clone());
                tokio::task::spawn_blocking(move || disks.attach(&dir, mb))
                    .await
                    .map_err(|e| std::io::Error::other(e.to_string()))?
                    .map_err(|e| EngineError::Failed {
                        op: "disk setup",
                        id: spec.instance_id.clone(),
                        detail: e.to_string(),
                    })?;
            }
            None => std::fs::create_dir_all(instance_disk::overlay_dir(&spec.dir, false))?,
        }
        let failed = |detail: String| EngineError::Failed {
            op: "network setup",
            id: spec.instance_id.clone(),
            detail,
        };
        let net = match (&spec.network, &self.net) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(failed("sandbox networking is off on this host".into()));
            }
            (Some(policy), Some(nets)) => {
                let slot = nets.take(policy).await.map_err(failed)?;
                let record = InstanceNet {
                    slot: slot.0,
                    guest_ip: nets.layout().guest_ip(slot),
                    policy: policy.clone(),
                };
                if let Err(e) = record.write(&spec.dir) {
                    nets.release(slot).await;
                    return Err(e.into());
                }
                self.slots()
                    .insert(spec.instance_id.clone(), (slot, spec.dir.clone()));
                debug!(instance_id = %spec.instance_id, slot = slot.0, guest_ip = %record.guest_ip, "network slot taken");
                Some(record)
            }
        };
        let netns = match (&net, &self.net) {
            (Some(r), Some(nets)) => {
                Some(Path::new("/run/netns").join(nets.layout().netns(Slot(r.slot))))
            }
            _ => None,
        };
        // A template build step has no /mnt of volumes (it may write its own /mnt).
        let staging = if spec.template_build {
            None
        } else {
            self.blocking_volumes(&spec.instance_id, &spec.dir, spec.volumes.clone(), true)
                .await?;
            Some(self.volumes.staging(&spec.instance_id))
        };
        let cfg = config::render(spec, netns.as_deref(), staging.as_deref());
        std::fs::write(spec.dir.join("bundle/config.json"), cfg.to_string())?;
        Ok(net)
    }

    /// Starts the shim around `runsc <global> <sub_args>` in its own session and waits for the
    /// guest socket, or with `two_stage` (a restore target: `sub_args` is `create`) until the
    /// first stage is done and the shim waits for the second. On any failure what
    /// [`GvisorEngine::prepare`] made (disk, network slot, directory) is destroyed.
    async fn start(
        &self,
        op: &'static str,
        spec: &SandboxSpec,
        net: Option<InstanceNet>,
        sub_args: Vec<String>,
        two_stage: bool,
    ) -> Result<Instance, EngineError> {
        let started = self.start_shim(op, spec, net, sub_args, two_stage).await;
        if started.is_err() {
            let _ = self.destroy(&spec.instance_id, &spec.dir).await;
        }
        started
    }

    async fn start_shim(
        &self,
        op: &'static str,
        spec: &SandboxSpec,
        net: Option<InstanceNet>,
        sub_args: Vec<String>,
        two_stage: bool,
    ) -> Result<Instance, EngineError> {
        let dir = &spec.dir;
        let socket = Self::socket(dir);
        let ready_file = dir.join("created");
        let (exit_file, log_path) = (dir.join("exit"), dir.join("shim.log"));
        let _ = std::fs::remove_file(&exit_file);
        // The shim's output until it drains its own (`--log`, bounded: issue 23 finding 3).
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let mut runsc_cmd = vec![self.runsc.binary.display().to_string()];
        // A template build writes into its own rootfs copy, which becomes the template: no
        // overlay (runsc's default `root:self` would leak between sandboxes, notes pitfall 2).
        let overlay =
            (!spec.template_build).then(|| instance_disk::overlay_dir(dir, spec.disk_mb.is_some()));
        runsc_cmd.extend(self.runsc.global_args(overlay.as_deref(), net.is_some()));
        if spec.template_build {
            runsc_cmd.push("--overlay2=none".into());
        }
        runsc_cmd.extend(sub_args);

        let (program, lead) =
            self.shim_command
                .split_first()
                .ok_or_else(|| EngineError::Failed {
                    op,
                    id: spec.instance_id.clone(),
                    detail: "no shim command".into(),
                })?;
        let mut cmd = std::process::Command::new(program);
        cmd.args(lead)
            .arg("--socket")
            .arg(&socket)
            .arg("--exit-file")
            .arg(&exit_file)
            .arg("--log")
            .arg(&log_path);
        if net.is_some() {
            cmd.arg("--hide-proc-sys-net");
        }
        if !spec.template_build {
            cmd.arg("--volume-staging")
                .arg(self.volumes.staging(&spec.instance_id));
        }
        if two_stage {
            cmd.arg("--control")
                .arg(dir.join("control.sock"))
                .arg("--ready-file")
                .arg(&ready_file);
        }
        cmd.arg("--")
            .args(&runsc_cmd)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // SAFETY: setsid() is async-signal-safe and touches no memory of the parent; it puts the
        // shim in its own session so a signal to the server's process group (Ctrl-C, kill -9 of a
        // process group) does not reach sandboxes.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        // Reap the shim whenever it exits so it never lingers as a zombie of the server.
        std::thread::spawn(move || {
            let _ = child.wait();
        });

        let started = Instant::now();
        let up = if two_stage { &ready_file } else { &socket };
        loop {
            if up.exists() {
                debug!(instance_id = %spec.instance_id, ms = started.elapsed().as_millis() as u64, "{op}: guest socket up");
                Self::add_memory_headroom(&spec.instance_id, spec.memory_mb);
                return Ok(Instance {
                    instance_id: spec.instance_id.clone(),
                    dir: dir.clone(),
                    guest_socket: socket,
                    network: net.as_ref().map(InstanceNet::report),
                });
            }
            if exit_file.exists() || started.elapsed() > START_TIMEOUT {
                let detail = crate::shim::output::last_line(&log_path);
                return Err(EngineError::Failed {
                    op,
                    id: spec.instance_id.clone(),
                    detail,
                });
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

#[async_trait]
impl Engine for GvisorEngine {
    fn name(&self) -> &'static str {
        "gvisor"
    }

    fn image_layout(&self) -> &'static str {
        config::MOUNT_LAYOUT
    }

    async fn boot(&self, spec: &SandboxSpec) -> Result<Instance, EngineError> {
        let net = self.prepare_or_clean(spec).await?;
        let bundle = spec.dir.join("bundle").display().to_string();
        self.start(
            "boot",
            spec,
            net,
            vec![
                "run".into(),
                format!("--bundle={bundle}"),
                spec.instance_id.clone(),
            ],
            false,
        )
        .await
    }

    /// Lands on a restore target of the spec's class when one is ready ([`Engine::keep_targets`]);
    /// otherwise makes the container as part of the restore.
    async fn restore(&self, spec: &SandboxSpec, image: &Path) -> Result<Instance, EngineError> {
        if let Some(t) = self.targets.take(&TargetClass::of(spec)) {
            self.refill_targets();
            let id = t.instance_id.clone();
            match self.restore_onto(t, spec, image).await {
                Ok(inst) => return Ok(inst),
                Err(e) => {
                    warn!(instance_id = %id, error = %e, "restore onto a target failed; restoring into a new container")
                }
            }
        }
        let net = self.prepare_or_clean(spec).await?;
        let bundle = spec.dir.join("bundle").display().to_string();
        let args = vec![
            "restore".into(),
            format!("--image-path={}", image.display()),
            format!("--bundle={bundle}"),
            spec.instance_id.clone(),
        ];
        self.start("restore", spec, net, args, false).await
    }

    async fn checkpoint(
        &self,
        id: &str,
        image: &Path,
        leave_running: bool,
    ) -> Result<(), EngineError> {
        std::fs::create_dir_all(image)?;
        let mut cmd = vec![self.runsc.binary.display().to_string()];
        cmd.extend(self.runsc.global_args(None, false));
        cmd.extend([
            "checkpoint".to_string(),
            format!("--image-path={}", image.display()),
            "--compression=none".to_string(),
        ]);
        if leave_running {
            cmd.push("--leave-running".into());
        }
        cmd.push(id.to_string());
        checkpoint::run(&self.shim_command, id, image, cmd).await
    }

    fn checkpoint_outcome(&self, image: &Path) -> CheckpointOutcome {
        checkpoint::outcome(image)
    }

    /// Freezes the instance's cgroup: every host task of the sandbox stops being scheduled
    /// (~1 ms instead of ~20 ms for a `runsc pause` process). When the instance has no freezer
    /// cgroup, or the freezer does not settle (a cgroup-v1 freezer can stay `FREEZING` while
    /// ptrace-stopped tasks are mid-transition), it is thawed again and paused by `runsc pause`
    /// (the sentry stops its tasks) instead; both leave memory untouched.
    async fn pause(&self, id: &str) -> Result<(), EngineError> {
        let owned = id.to_string();
        let frozen = tokio::task::spawn_blocking(move || cgroup::freeze(&owned, true))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        match frozen {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => {
                warn!(instance_id = id, error = %e, "freezer did not settle; using runsc pause");
                let _ = cgroup::freeze(id, false);
            }
        }
        self.runsc
            .call("pause", id, &["pause", id])
            .await
            .map(|_| ())
    }

    /// Thaws a frozen instance, or `runsc resume`s one that `runsc pause` stopped.
    async fn resume(&self, id: &str) -> Result<(), EngineError> {
        if cgroup::is_frozen(id) {
            let owned = id.to_string();
            return match tokio::task::spawn_blocking(move || cgroup::freeze(&owned, false)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(EngineError::Failed {
                    op: "resume",
                    id: id.into(),
                    detail: e.to_string(),
                }),
                Err(e) => Err(EngineError::Failed {
                    op: "resume",
                    id: id.into(),
                    detail: e.to_string(),
                }),
            };
        }
        self.runsc
            .call("resume", id, &["resume", id])
            .await
            .map(|_| ())
    }

    /// Also releases the instance's network slot when this process holds it (an orphan's
    /// namespace was already removed by [`Engine::recover`], and its slot number may be in use
    /// again).
    async fn destroy(&self, id: &str, dir: &Path) -> Result<(), EngineError> {
        // The network goes first: it takes milliseconds, while runsc can take seconds to stop a
        // sandbox (which, disconnected, just keeps its netstack to itself until it dies).
        let held = self.slots().remove(id);
        if let (Some((slot, _)), Some(nets)) = (held, &self.net) {
            nets.release(slot).await;
            debug!(instance_id = id, slot = slot.0, "network slot released");
        }
        // Frozen tasks cannot die: thaw a paused instance before killing it.
        let _ = cgroup::freeze(id, false);
        let exit_file = dir.join("exit");
        // `runsc kill KILL` stops a running sandbox at once (~0.15 s here) and the shim's
        // `runsc run`/`restore` then removes the container; `delete --force` on a running one
        // waits ~5 s and gives up ("context deadline exceeded") before killing it.
        if self
            .runsc
            .call("kill", id, &["kill", id, "KILL"])
            .await
            .is_ok()
        {
            for _ in 0..200 {
                if exit_file.exists() || !dir.exists() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Volumes are released before runsc's slow teardown: the sandbox's processes are
        // killed, so nothing writes to them any more, and their images are closed.
        self.stop_and_release(id, dir, false).await;
        // Whatever the kill could not reach (a stopped, or half-created container).
        if let Err(e) = self
            .runsc
            .call("delete", id, &["delete", "--force", id])
            .await
        {
            debug!(instance_id = id, error = %e, "runsc delete");
        }
        // The shim exits once runsc does; give it a moment so the directory is quiet.
        for _ in 0..100 {
            if exit_file.exists() || !dir.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.stop_and_release(id, dir, true).await;
        cgroup::remove(id);
        self.memory_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        // The disk must be unmounted before its directory goes (its image goes with it).
        let owned = dir.to_path_buf();
        let unmounted = tokio::task::spawn_blocking(move || Disks::detach(&owned))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if let Err(e) = unmounted {
            warn!(instance_id = id, error = %e, "unmounting instance disk");
            return Err(EngineError::Failed {
                op: "destroy",
                id: id.to_string(),
                detail: "instance disk still mounted".into(),
            });
        }
        if dir.exists() {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                warn!(instance_id = id, error = %e, "removing instance directory");
                return Err(e.into());
            }
        }
        Ok(())
    }

    async fn status(&self, id: &str) -> Result<InstanceStatus, EngineError> {
        // `runsc state` asks the sandbox itself, which cannot answer while frozen.
        if cgroup::is_frozen(id) {
            return Ok(InstanceStatus::Paused);
        }
        match self.runsc.call("state", id, &["state", id]).await {
            Ok(out) => {
                let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
                // runsc reports what its state file says; after a crash that killed the
                // sandbox process (or a host reboot, where its pid may now be another
                // process's) the file still says running.
                let pid = v["pid"].as_i64().and_then(|p| i32::try_from(p).ok());
                if !pid.is_some_and(|p| sandbox_process_alive(p, id)) {
                    return Ok(InstanceStatus::Stopped);
                }
                Ok(match v["status"].as_str() {
                    Some("running") => InstanceStatus::Running,
                    Some("paused") => InstanceStatus::Paused,
                    _ => InstanceStatus::Stopped,
                })
            }
            Err(EngineError::Failed { detail, .. })
                if detail.contains("does not exist") || detail.contains("not found") =>
            {
                Ok(InstanceStatus::Missing)
            }
            Err(e) => Err(e),
        }
    }

    fn exit(&self, id: &str, dir: &Path) -> Option<InstanceExit> {
        // The shim writes runsc's exit code there when runsc exits (shim.rs).
        let code: i32 = std::fs::read_to_string(dir.join("exit"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        // The memory cgroup's OOM killer may pick any process of the instance (the sentry,
        // the gofer, runsc itself): any abnormal end is checked against the kernel's log.
        let out_of_memory = code != 0 && cgroup::killed_by_oom(id);
        Some(InstanceExit {
            code,
            out_of_memory,
        })
    }

    fn disk_usage(&self, dir: &Path) -> Option<(u64, u64)> {
        Disks::usage(dir)
    }

    fn memory_used(&self, id: &str) -> Option<u64> {
        let known = self
            .memory_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(id)
            .cloned();
        let file = match known {
            Some(f) => f,
            None => {
                let f = cgroup::memory_usage_file(id)?;
                self.memory_files
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(id.to_string(), f.clone());
                f
            }
        };
        let used = cgroup::read_bytes(&file);
        if used.is_none() {
            // Gone (or replaced): found again next time.
            self.memory_files
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(id);
        }
        used
    }

    async fn stats(&self, id: &str) -> Result<InstanceStats, EngineError> {
        Ok(cgroup::stats(id))
    }

    async fn list(&self) -> Result<Vec<String>, EngineError> {
        let out = self.runsc.call("list", "-", &["list", "--quiet"]).await?;
        Ok(out
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect())
    }

    async fn set_network_policy(
        &self,
        id: &str,
        policy: &NetworkPolicy,
    ) -> Result<(), EngineError> {
        let found = self.slots().get(id).cloned();
        let (Some((slot, dir)), Some(nets)) = (found, &self.net) else {
            return Err(EngineError::NotFound(id.to_string()));
        };
        nets.set_policy(slot, policy)
            .await
            .map_err(|detail| EngineError::Failed {
                op: "network policy",
                id: id.to_string(),
                detail,
            })?;
        InstanceNet {
            slot: slot.0,
            guest_ip: nets.layout().guest_ip(slot),
            policy: policy.clone(),
        }
        .write(&dir)?;
        Ok(())
    }

    async fn host_service_addr(&self) -> Result<Option<std::net::Ipv4Addr>, EngineError> {
        let Some(nets) = &self.net else {
            return Ok(None);
        };
        nets.ensure_host_addr()
            .await
            .map(Some)
            .map_err(|detail| EngineError::Failed {
                op: "host service address",
                id: "-".into(),
                detail,
            })
    }

    async fn set_host_service_ports(&self, ports: &[u16]) -> Result<(), EngineError> {
        let Some(nets) = &self.net else {
            return Ok(());
        };
        nets.set_host_ports(ports)
            .await
            .map_err(|detail| EngineError::Failed {
                op: "host service ports",
                id: "-".into(),
                detail,
            })
    }

    async fn attach_volumes(
        &self,
        id: &str,
        dir: &Path,
        volumes: &[VolumeMount],
    ) -> Result<(), EngineError> {
        self.blocking_volumes(id, dir, volumes.to_vec(), false)
            .await
    }

    async fn release_volumes(&self, id: &str, dir: &Path) -> Result<(), EngineError> {
        self.stop_and_release(id, dir, false).await;
        Ok(())
    }

    async fn format_volume(&self, image: &Path, size_mb: u32) -> Result<(), EngineError> {
        let owned = image.to_path_buf();
        blocking("volume format", move || {
            disk::format(&owned, size_mb, disk::Kind::Volume)
        })
        .await
    }

    async fn grow_volume(&self, image: &Path, size_mb: u32) -> Result<(), EngineError> {
        if self.volumes.is_attached(image) {
            return Err(EngineError::Failed {
                op: "volume grow",
                id: "-".into(),
                detail: "the volume is attached".into(),
            });
        }
        let owned = image.to_path_buf();
        blocking("volume grow", move || disk::grow(&owned, size_mb)).await
    }

    async fn volume_usage(&self, image: &Path) -> Result<VolumeUsage, EngineError> {
        let (vols, owned) = (self.volumes.clone(), image.to_path_buf());
        tokio::task::spawn_blocking(move || vols.usage(&owned))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?
            .map_err(EngineError::Io)
    }

    async fn recover(&self, keep: &[(InstanceId, PathBuf)]) -> Result<(), EngineError> {
        // Volumes first: their recovery unmounts the volume mounts of instances that are gone
        // (which detaches their loop devices), and re-mounts those of the ones that live on.
        let (vols, owned) = (self.volumes.clone(), keep.to_vec());
        tokio::task::spawn_blocking(move || vols.recover(&owned))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        // Loop devices of instance disks and volume images that nothing mounts (a crash
        // between attach and mount, or after a lazy unmount). Mounted disks of instances that
        // are gone go with their directories (the server destroys those through `destroy`).
        let scanned = [self.instances_dir.clone(), self.volumes_dir.clone()];
        let _ = tokio::task::spawn_blocking(move || {
            for dev in scanned.iter().flat_map(|d| disk::collect_stale(d).1) {
                match disk::detach(&dev) {
                    Ok(()) => warn!(device = %dev.display(), "detached a stray loop device"),
                    Err(e) => {
                        warn!(device = %dev.display(), error = %e, "detaching a stray loop device")
                    }
                }
            }
        })
        .await;
        let Some(nets) = &self.net else {
            return Ok(());
        };
        let mut kept = Vec::new();
        for (id, dir) in keep {
            if let Some(r) = InstanceNet::read(dir) {
                self.slots().insert(id.clone(), (Slot(r.slot), dir.clone()));
                kept.push((Slot(r.slot), r.policy));
            }
        }
        nets.recover(&kept)
            .await
            .map_err(|detail| EngineError::Failed {
                op: "network recovery",
                id: "-".into(),
                detail,
            })
    }

    fn keep_targets(&self, class: TargetClass, least: usize, most: usize) {
        self.destroy_targets(self.targets.set_goal(class, least, most));
        self.refill_targets();
    }

    fn trim_targets(&self) {
        self.destroy_targets(self.targets.trim());
    }

    fn targets_held(&self) -> usize {
        self.targets.held()
    }

    async fn make_targets(&self, class: TargetClass, count: usize, at_most: usize) {
        let short = count.saturating_sub(self.targets.ready_fitting(&class));
        if short == 0 || short > at_most {
            return;
        }
        let made = futures::future::join_all((0..short).map(|_| self.make_target(&class))).await;
        for m in made {
            match m {
                // Made while the engine shut down: nobody would destroy it later.
                Ok(t)
                    if self
                        .targets
                        .closed
                        .load(std::sync::atomic::Ordering::SeqCst) =>
                {
                    let _ = self.destroy(&t.instance_id, &t.dir).await;
                }
                Ok(t) => self.targets.add(t),
                Err(e) => warn!(error = %e, "making a restore target for a fork"),
            }
        }
    }

    fn targets_ready(&self) -> usize {
        self.targets.ready()
    }

    async fn shutdown(&self, instances_remain: bool) {
        while self
            .targets
            .refilling
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            self.targets
                .closed
                .store(true, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let made = self.targets.drain();
        futures::future::join_all(made.iter().map(|t| self.destroy(&t.instance_id, &t.dir))).await;
        if let Some(nets) = &self.net {
            nets.drain_stock().await;
            if !instances_remain {
                nets.remove_table().await;
            }
        }
        if !instances_remain {
            self.volumes.close();
        }
    }
}

impl GvisorEngine {
    /// Raises instance `id`'s memory cgroup by [`cgroup::headroom_bytes`] over its
    /// `memory_mb` once runsc has made it (on a thread of its own: a one-stage start returns
    /// when the guest socket is up, before runsc has made the cgroup), so the guest's memory
    /// guard acts before the host kills the sandbox (issue 8 point 3). A failure is logged: the
    /// sandbox then runs with runsc's limit, and an overrun ends it whole (the death watch
    /// reports it).
    fn add_memory_headroom(id: &str, memory_mb: u32) {
        let id = id.to_string();
        let raise = move || match cgroup::add_headroom(&id, memory_mb, START_TIMEOUT) {
            Ok(true) => {}
            Ok(false) => warn!(instance_id = %id, "no memory cgroup appeared to give headroom"),
            Err(e) => {
                warn!(instance_id = %id, error = %e, "cannot give the memory cgroup its headroom")
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("cgroup-headroom".into())
            .spawn(raise)
        {
            warn!(error = %e, "cannot start the memory headroom thread");
        }
    }

    /// Destroys targets taken out of the stock, in the background.
    fn destroy_targets(&self, extra: Vec<Target>) {
        for t in extra {
            let engine = self.clone();
            tokio::spawn(async move {
                let _ = engine.destroy(&t.instance_id, &t.dir).await;
            });
        }
    }

    /// Makes one restore target of `class`: bundle, network slot, `runsc create` under a
    /// two-stage shim.
    async fn make_target(&self, class: &TargetClass) -> Result<Target, EngineError> {
        let instance_id = instance_id_from(*uuid::Uuid::new_v4().as_bytes());
        let dir = self.instances_dir.join(&instance_id);
        let spec = SandboxSpec {
            instance_id: instance_id.clone(),
            dir: dir.clone(),
            rootfs: class.rootfs.clone(),
            guest_dir: class.guest_dir.clone(),
            cpu: class.cpu,
            memory_mb: class.memory_mb,
            hostname: "sandbox".into(),
            network: class.network.clone(),
            template_build: false,
            disk_mb: class.disk_mb,
            volumes: Vec::new(),
        };
        let net = self.prepare_or_clean(&spec).await?;
        let bundle = dir.join("bundle").display().to_string();
        let args = vec![
            "create".into(),
            format!("--bundle={bundle}"),
            instance_id.clone(),
        ];
        self.start("create", &spec, net, args, true).await?;
        Ok(Target {
            instance_id,
            dir,
            class: class.clone(),
        })
    }

    /// Makes targets in the background until every class has its count (one at a time: each
    /// is a few process starts, and restores matter more).
    fn refill_targets(&self) {
        use std::sync::atomic::Ordering;
        if self.targets.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        let engine = self.clone();
        tokio::spawn(async move {
            while let Some((i, class)) = engine.targets.next_to_make() {
                let made = engine.make_target(&class).await;
                engine.targets.made(i);
                match made {
                    Ok(t) => {
                        debug!(instance_id = %t.instance_id, "restore target ready");
                        engine.targets.add(t);
                    }
                    Err(e) => {
                        warn!(error = %e, "making a restore target");
                        break;
                    }
                }
            }
            engine.targets.refilling.store(false, Ordering::SeqCst);
        });
    }

    /// Restores `image` onto target `t` for `spec`: its policy if `spec` wants another one,
    /// then `runsc restore` through the target's control socket.
    async fn restore_onto(
        &self,
        t: Target,
        spec: &SandboxSpec,
        image: &Path,
    ) -> Result<Instance, EngineError> {
        let fail = |detail: String| EngineError::Failed {
            op: "restore",
            id: t.instance_id.clone(),
            detail,
        };
        let result = async {
            if let Some(want) = spec
                .network
                .as_ref()
                .filter(|p| Some(*p) != t.class.network.as_ref())
            {
                self.set_network_policy(&t.instance_id, want).await?;
            }
            if !spec.volumes.is_empty() {
                self.blocking_volumes(&t.instance_id, &t.dir, spec.volumes.clone(), false)
                    .await?;
            }
            let mut argv = vec![self.runsc.binary.display().to_string()];
            let overlay = instance_disk::overlay_dir(&t.dir, t.class.disk_mb.is_some());
            argv.extend(
                self.runsc
                    .global_args(Some(&overlay), t.class.network.is_some()),
            );
            argv.extend([
                "restore".to_string(),
                format!("--image-path={}", image.display()),
                format!("--bundle={}", t.dir.join("bundle").display()),
                t.instance_id.clone(),
            ]);
            let line =
                serde_json::to_string(&ControlRequest { argv }).map_err(|e| fail(e.to_string()))?;
            let control = t.dir.join("control.sock");
            let reply = send_control(&control, &line)
                .await
                .map_err(|e| fail(e.to_string()))?;
            if reply.trim() != "ok" {
                return Err(fail(format!("shim: {}", reply.trim())));
            }
            Self::add_memory_headroom(&t.instance_id, t.class.memory_mb);
            Ok(Instance {
                instance_id: t.instance_id.clone(),
                dir: t.dir.clone(),
                guest_socket: Self::socket(&t.dir),
                network: InstanceNet::read(&t.dir).map(|n| n.report()),
            })
        }
        .await;
        if result.is_err() {
            let _ = self.destroy(&t.instance_id, &t.dir).await;
        }
        result
    }

    /// Makes the staging directory of instance `id` with `volumes` (`fresh`: before its
    /// container starts) or attaches them to its existing one, off the async runtime (mounts
    /// take milliseconds).
    async fn blocking_volumes(
        &self,
        id: &str,
        dir: &Path,
        volumes: Vec<VolumeMount>,
        fresh: bool,
    ) -> Result<(), EngineError> {
        let (vols, owned_id, owned_dir) = (self.volumes.clone(), id.to_string(), dir.to_path_buf());
        let done = tokio::task::spawn_blocking(move || {
            if fresh {
                vols.prepare(&owned_id, &owned_dir, &volumes)
            } else {
                vols.attach(&owned_id, &owned_dir, &volumes)
            }
        })
        .await
        .map_err(|e| EngineError::Failed {
            op: "volume attach",
            id: id.to_string(),
            detail: e.to_string(),
        })?;
        done.map_err(|e| EngineError::Failed {
            op: "volume attach",
            id: id.to_string(),
            detail: e.to_string(),
        })
    }

    /// Stops every process of instance `id` and releases its volumes (or, with
    /// `remove_staging`, its whole staging directory), off the async runtime.
    async fn stop_and_release(&self, id: &str, dir: &Path, remove_staging: bool) {
        let (vols, owned_id, owned_dir) = (self.volumes.clone(), id.to_string(), dir.to_path_buf());
        let _ = tokio::task::spawn_blocking(move || {
            if vols.has_volumes(&owned_id, &owned_dir) && !cgroup::kill_all(&owned_id) {
                warn!(instance_id = %owned_id, "processes still alive; volumes detach lazily");
            }
            if remove_staging {
                vols.remove_instance(&owned_id, &owned_dir);
            } else {
                vols.release(&owned_id, &owned_dir);
            }
        })
        .await;
    }

    /// [`GvisorEngine::prepare`], removing what it made when it fails.
    async fn prepare_or_clean(
        &self,
        spec: &SandboxSpec,
    ) -> Result<Option<InstanceNet>, EngineError> {
        match self.prepare(spec).await {
            Ok(net) => Ok(net),
            Err(e) => {
                let _ = self.destroy(&spec.instance_id, &spec.dir).await;
                Err(e)
            }
        }
    }
}

/// Runs a disk command off the async runtime; its error (which names host paths) becomes the
/// engine error's detail, for logs.
async fn blocking<F>(op: &'static str, f: F) -> Result<(), EngineError>
where
    F: FnOnce() -> Result<(), disk::DiskError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?
        .map_err(|e| EngineError::Failed {
            op,
            id: "-".into(),
            detail: e.to_string(),
        })
}

/// Sends one request line to a shim's control socket and returns its reply line.
async fn send_control(path: &Path, line: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut stream = tokio::net::UnixStream::connect(path).await?;
    stream.write_all(line.as_bytes()).await?;
    stream.write_all(b"\n").await?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply).await?;
    Ok(reply)
}

/// True when `pid` is a live (not zombie) `runsc-sandbox` process of instance `id`: its
/// command line starts with `runsc-sandbox` and ends with the container id (runsc `boot`'s
/// last argument). A pid from runsc's state file is checked this way because the file outlives
/// the process: kill -9 of everything, or a host reboot after which the pid may be reused.
fn sandbox_process_alive(pid: i32, id: &str) -> bool {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let Ok(cmdline) = std::fs::read(proc_dir.join("cmdline")) else {
        return false;
    };
    let mut args = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(String::from_utf8_lossy);
    let first_is_sandbox = args.next().is_some_and(|a| a == "runsc-sandbox");
    let last_is_id = args.next_back().is_some_and(|a| a == id);
    // A zombie keeps its pid (and answers kill(pid, 0)) until reaped, but its cmdline is empty,
    // so it fails the checks above; the stat state is read too for a process exiting just now.
    let zombie = std::fs::read_to_string(proc_dir.join("stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(true);
    first_is_sandbox && last_is_id && !zombie
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_live_runsc_sandbox_of_the_instance_counts_as_its_process() {
        // A stand-in named like runsc's sandbox process, with the container id last.
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("/bin/sh")
            .arg0("runsc-sandbox")
            // `read` is a builtin: the shell itself waits, with no child left behind.
            .args(["-c", "read line; true", "ps-test"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !sandbox_process_alive(pid, "ps-test") {
            assert!(std::time::Instant::now() < deadline, "stand-in never seen");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            !sandbox_process_alive(pid, "ps-other"),
            "another instance's id"
        );
        assert!(
            !sandbox_process_alive(std::process::id() as i32, "ps-test"),
            "not runsc-sandbox"
        );
        child.kill().unwrap();
        // Killed but not reaped yet: a zombie, which kill(pid, 0) would still find.
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!sandbox_process_alive(pid, "ps-test"), "a zombie");
        child.wait().unwrap();
        assert!(!sandbox_process_alive(pid, "ps-test"), "gone");
    }

    #[test]
    fn socket_paths_must_fit_a_unix_socket_address() {
        // 107 - len("/ps-<32 hex>/control.sock") = 58 bytes of instances dir at most.
        let fits = PathBuf::from(format!("/{}", "d".repeat(57)));
        assert!(check_socket_paths(&fits).is_ok());
        let too_deep = PathBuf::from(format!("/{}", "d".repeat(58)));
        let err = check_socket_paths(&too_deep).unwrap_err().to_string();
        assert!(
            err.contains("108 bytes") && err.contains("1 bytes shorter"),
            "{err}"
        );
        // A real instance socket at the limit binds; one byte more does not.
        let tmp = std::env::temp_dir();
        let base = tmp.join(format!("ps-sock-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let room = MAX_SOCKET_PATH - base.as_os_str().len() - 1;
        let at_limit = base.join("s".repeat(room));
        assert!(std::os::unix::net::UnixListener::bind(&at_limit).is_ok());
        let over = base.join("s".repeat(room + 1));
        assert!(std::os::unix::net::UnixListener::bind(&over).is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
