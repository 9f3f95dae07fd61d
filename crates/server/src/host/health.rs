//! The health monitor (seed 003 "Health monitor"): every 5 s each running sandbox's guest
//! daemon is pinged (1 s to connect, 1 s to answer) and its CPU use sampled from its cgroup; every 30 s the
//! engine is asked whether the instance still exists. Three consecutive failed probes mark the
//! sandbox `failed` and release its resources.
//!
//! Besides, the death watch asks the engine every [`DEATH_POLL`] whether a running sandbox's
//! instance ended by itself ([`Engine::exit`]: over its memory limit, a crash): such a sandbox
//! is marked `failed` at once with the cause (issue 8: "marked `failed` within 2 s ... with an
//! event naming the cause (`oom`), and requests to it answer 409 `sandbox failed: out of
//! memory` at once").
//!
//! The ping's answer also carries the processes the guest's memory guard killed (one process
//! dies instead of the whole sandbox, issue 8 point 3): each becomes a sandbox event whose
//! cause starts with `oom`.
//!
//! [`Engine::exit`]: pandastack_engine::Engine::exit

use super::Host;
use pandastack_engine::InstanceStatus;
use pandastack_guest_protocol::{GuestMsg, HostMsg, OomKill};
use pandastack_store::now_ms;
use std::sync::Arc;
use std::time::Duration;
use tracing::warn;

/// Guest probe period.
pub const PROBE_PERIOD: Duration = Duration::from_secs(5);
/// Engine state check period, in probe periods (30 s).
const ENGINE_EVERY: u64 = 6;
/// Time a guest has to answer a ping (issue 8: probes time out in about 1 s).
const PING_TIMEOUT: Duration = Duration::from_secs(1);
/// Consecutive failed probes that mark a sandbox failed.
pub const MAX_FAILED_PROBES: u32 = 3;
/// How often the death watch looks at every running sandbox's instance (a file read each).
pub const DEATH_POLL: Duration = Duration::from_millis(250);

impl Host {
    /// Spawns the monitor task.
    pub fn spawn_health_monitor(self: &Arc<Self>) {
        let host = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROBE_PERIOD);
            let mut round: u64 = 0;
            loop {
                tick.tick().await;
                round += 1;
                for live in host.all() {
                    let host = host.clone();
                    tokio::spawn(async move {
                        host.probe(&live, round.is_multiple_of(ENGINE_EVERY)).await
                    });
                }
            }
        });
    }

    /// Spawns the death watch (see the module doc).
    pub fn spawn_death_watch(self: &Arc<Self>) {
        let host = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(DEATH_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                for live in host.all() {
                    host.look_for_death(&live).await;
                }
            }
        });
    }

    /// Fails `live` when its instance ended by itself. A lifecycle operation in progress owns
    /// the instance (a checkpoint or a destroy ends it on purpose): it is looked at again
    /// once that is over.
    async fn look_for_death(self: &Arc<Self>, live: &Arc<super::Live>) {
        if live.gate.try_read().is_err() || live.failure().is_some() {
            return;
        }
        let (status, iid, dir, memory_mb) = {
            let r = live.row.lock().await;
            (
                r.status.clone(),
                r.instance_id.clone(),
                r.instance_dir.clone(),
                r.memory_mb,
            )
        };
        let (Some(iid), Some(dir)) = (iid, dir) else {
            return;
        };
        if status != "running" {
            return;
        }
        let Some(exit) = self.engine.exit(&iid, std::path::Path::new(&dir)) else {
            return;
        };
        let cause = if exit.out_of_memory {
            format!("oom: out of memory (over its {memory_mb} MiB)")
        } else {
            format!("the sandbox exited by itself (code {})", exit.code)
        };
        // Requests answer with the cause from now on, before the state changes.
        live.set_failure(Some(cause.clone()));
        let (host, live) = (self.clone(), live.clone());
        tokio::spawn(async move {
            let gate = live.gate.write().await;
            let current = {
                let r = live.row.lock().await;
                r.status == "running" && r.instance_id.as_deref() == Some(iid.as_str())
            };
            drop(gate);
            if current {
                warn!(sandbox_id = %live.id, instance_id = %iid, code = exit.code, oom = exit.out_of_memory, "sandbox died: marking failed");
                host.fail(&live, &cause).await;
            } else {
                live.set_failure(None);
            }
        });
    }

    async fn probe(&self, live: &Arc<super::Live>, check_engine: bool) {
        // A lifecycle operation in progress owns the sandbox: probe it next round. The gate is
        // only tested, never held across the probe, so a probe never delays a request or a
        // lifecycle operation (issue 8).
        if live.gate.try_read().is_err() {
            return;
        }
        let (status, iid) = {
            let r = live.row.lock().await;
            (r.status.clone(), r.instance_id.clone())
        };
        if status != "running" {
            return;
        }
        let Some(iid) = iid else { return };
        if let Ok(stats) = self.engine.stats(&iid).await {
            live.record_cpu(stats.cpu_ns);
        }
        let mut ok = match live.probe_conn().await {
            Ok(Some(conn)) => {
                // Renews the memory watch's lease (or keeps it taken back).
                let ping = conn.call(HostMsg::Ping {
                    id: conn.new_id(),
                    memory_lease_ms: live.memory_near(&iid).map(super::memory_watch::lease_ms),
                });
                match tokio::time::timeout(PING_TIMEOUT, ping).await {
                    Ok(Ok((GuestMsg::Pong { oom_kills, .. }, _))) => {
                        self.record_oom_kills(live, &oom_kills).await;
                        true
                    }
                    _ => false,
                }
            }
            // A request is connecting right now: no verdict this round.
            Ok(None) => return,
            Err(_) => false,
        };
        if ok && check_engine {
            ok = matches!(self.engine.status(&iid).await, Ok(InstanceStatus::Running));
        }
        let failures = live.record_probe(ok);
        if failures < MAX_FAILED_PROBES {
            return;
        }
        // Only fail the instance that was probed: a hibernate or wake in between replaced it.
        let _gate = live.gate.write().await;
        let current = {
            let r = live.row.lock().await;
            r.status == "running" && r.instance_id.as_deref() == Some(iid.as_str())
        };
        if current {
            warn!(sandbox_id = %live.id, failures, "sandbox unhealthy: marking failed");
            drop(_gate);
            self.fail(live, "health check failed").await;
        }
    }

    /// Records one sandbox event per process the guest's memory guard killed (issue 8 point
    /// 3): `running` -> `running` with the cause `oom: ` + [`OomKill::describe`] (`oom: killed
    /// <name> (pid N, X MiB resident) when the sandbox used Y of its Z MiB`). The kills come with the guest's `Pong`s, so an
    /// event follows its kill within one probe period ([`PROBE_PERIOD`]).
    pub(super) async fn record_oom_kills(&self, live: &super::Live, kills: &[OomKill]) {
        for k in kills {
            let cause = format!("oom: {}", k.describe());
            warn!(sandbox_id = %live.id, process = %k.name, pid = k.pid, rss_bytes = k.rss_bytes, "memory guard killed a process");
            let workspace = live.row.lock().await.workspace_id.clone();
            match self
                .store
                .insert_event(&workspace, &live.id, "running", "running", &cause, now_ms())
                .await
            {
                Ok(ev) if !self.cfg.cluster => {
                    let _ = self.events.send(ev);
                }
                Ok(_) => {}
                Err(e) => warn!(sandbox_id = %live.id, error = %e, "recording an oom kill"),
            }
        }
    }
}
