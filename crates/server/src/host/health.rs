//! The health monitor (seed 003 "Health monitor"): every 5 s each running sandbox's guest
//! daemon is pinged and its CPU use sampled from its cgroup; every 30 s the engine is asked
//! whether the instance still exists.
//!
//! A probe that gets no answer is not a dead sandbox (issue 23 finding 11: on a host at a load
//! average of ~28 every probe timed out, and 17 healthy sandboxes were destroyed):
//! - one probe at a time per sandbox; its timeout starts at [`FIRST_TIMEOUT`] and doubles with
//!   each unanswered probe up to [`MAX_TIMEOUT`];
//! - after an unanswered probe the engine is asked whether the instance is still there: one
//!   that is gone (stopped, missing) is failed at once;
//! - otherwise the guest's silence is counted, but only while the host is not starved
//!   (`pressure.rs`); the sandbox is failed once the counted silence reaches
//!   `--health-fail-after-seconds` ([`super::HostConfig::health_fail_after_seconds`]). Until
//!   then the instance is kept. One answer clears the count.
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
use std::time::{Duration, Instant};
use tracing::warn;

/// Guest probe period.
pub const PROBE_PERIOD: Duration = Duration::from_secs(5);
/// Engine state check period, in probe periods (30 s).
const ENGINE_EVERY: u64 = 6;
/// Time a guest has to answer the first probe after an answered one, connecting included
/// (issue 8: probes time out in about 1 s).
pub const FIRST_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest a probe waits for an answer (the timeout doubles up to it).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(16);
/// How long the health monitor waits for the engine to say whether an instance is there.
const ENGINE_TIMEOUT: Duration = Duration::from_secs(5);
/// The most one gap between two unanswered probes adds to a guest's silence (a server that
/// was stopped, or a probe that waited long, does not count in full).
const MAX_SILENT_STEP: Duration = Duration::from_secs(30);

/// A guest's silence to health probes: see the module doc.
#[derive(Debug, Default)]
pub struct Silence {
    /// Unanswered probes since the last answer.
    unanswered: u32,
    /// Silence counted while the host was not starved.
    counted: Duration,
    /// When the last unanswered probe ended.
    last: Option<Instant>,
}

impl Silence {
    /// The timeout of the next probe: [`FIRST_TIMEOUT`] doubled per unanswered probe, at most
    /// [`MAX_TIMEOUT`].
    pub fn timeout(&self) -> Duration {
        FIRST_TIMEOUT
            .saturating_mul(1 << self.unanswered.min(8))
            .min(MAX_TIMEOUT)
    }

    /// The guest answered: the silence is over.
    pub fn answered(&mut self) {
        *self = Silence::default();
    }

    /// A probe ended unanswered at `now`; `starved` says whether the host is starved (then
    /// the time since the last unanswered probe is not counted). Returns the silence counted
    /// so far.
    pub fn unanswered(&mut self, now: Instant, starved: bool) -> Duration {
        if let Some(last) = self.last {
            if !starved {
                self.counted += now.saturating_duration_since(last).min(MAX_SILENT_STEP);
            }
        }
        self.last = Some(now);
        self.unanswered += 1;
        self.counted
    }
}

/// How often the death watch looks at every running sandbox's instance (a file read each).
pub const DEATH_POLL: Duration = Duration::from_millis(250);

impl Host {
    /// Spawns the monitor task.
    pub fn spawn_health_monitor(self: &Arc<Self>) {
        self.pressure.spawn_sampler();
        let host = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROBE_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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

    /// One probe of `live` (at most one runs per sandbox): see the module doc.
    async fn probe(&self, live: &Arc<super::Live>, check_engine: bool) {
        use std::sync::atomic::Ordering;
        if live.probing.swap(true, Ordering::SeqCst) {
            return;
        }
        self.probe_once(live, check_engine).await;
        live.probing.store(false, Ordering::SeqCst);
    }

    async fn probe_once(&self, live: &Arc<super::Live>, check_engine: bool) {
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
        let timeout = live
            .silence
            .lock()
            .map(|s| s.timeout())
            .unwrap_or(MAX_TIMEOUT);
        let started = Instant::now();
        let answered = match live.probe_conn(timeout).await {
            Ok(Some(conn)) => {
                // Renews the memory watch's lease (or keeps it taken back).
                let ping = conn.call(HostMsg::Ping {
                    id: conn.new_id(),
                    memory_lease_ms: live.memory_near(&iid).map(super::memory_watch::lease_ms),
                });
                let left = timeout.saturating_sub(started.elapsed());
                match tokio::time::timeout(left, ping).await {
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
        let gone = if !answered || check_engine {
            match tokio::time::timeout(ENGINE_TIMEOUT, self.engine.status(&iid)).await {
                Ok(Ok(InstanceStatus::Stopped | InstanceStatus::Missing)) => true,
                Ok(Ok(InstanceStatus::Running | InstanceStatus::Paused)) => false,
                // The engine could not tell: `runsc state` asks the sandbox itself, which does
                // not answer while it is stopped or starved.
                Ok(Err(e)) => {
                    warn!(sandbox_id = %live.id, error = %e, "health: asking the engine about the instance");
                    false
                }
                Err(_) => {
                    warn!(sandbox_id = %live.id, timeout_ms = ENGINE_TIMEOUT.as_millis() as u64, "health: the engine did not say whether the instance is there");
                    false
                }
            }
        } else {
            false
        };
        let cause = if gone {
            "health check failed: the sandbox's instance is gone".to_string()
        } else if answered {
            if let Ok(mut s) = live.silence.lock() {
                s.answered();
            }
            return;
        } else {
            let starved = self.pressure.starved();
            let counted = live
                .silence
                .lock()
                .map(|mut s| s.unanswered(Instant::now(), starved.is_some()))
                .unwrap_or_default();
            let limit = Duration::from_secs(self.cfg.health_fail_after_seconds);
            if counted < limit {
                warn!(sandbox_id = %live.id, timeout_ms = timeout.as_millis() as u64,
                    silent_ms = counted.as_millis() as u64, starved = starved.as_deref().unwrap_or("no"),
                    "health: the guest did not answer; keeping the sandbox");
                return;
            }
            format!(
                "health check failed: the guest did not answer for {} s",
                counted.as_secs()
            )
        };
        // Only fail the instance that was probed: a hibernate or wake in between replaced it.
        let gate = live.gate.write().await;
        let current = {
            let r = live.row.lock().await;
            r.status == "running" && r.instance_id.as_deref() == Some(iid.as_str())
        };
        drop(gate);
        if current {
            warn!(sandbox_id = %live.id, cause = %cause, "sandbox unhealthy: marking failed");
            self.fail(live, &cause).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_doubles_up_to_the_cap() {
        let mut s = Silence::default();
        let t0 = Instant::now();
        let mut seen = vec![s.timeout()];
        for i in 0..8 {
            s.unanswered(t0 + Duration::from_secs(i), false);
            seen.push(s.timeout());
        }
        let secs: Vec<u64> = seen.iter().map(Duration::as_secs).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 16, 16, 16, 16]);
        s.answered();
        assert_eq!(s.timeout(), FIRST_TIMEOUT);
    }

    #[test]
    fn silence_counts_only_while_the_host_is_not_starved() {
        let mut s = Silence::default();
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(s.unanswered(at(0), false), Duration::ZERO);
        assert_eq!(s.unanswered(at(5), true), Duration::ZERO);
        assert_eq!(s.unanswered(at(10), true), Duration::ZERO);
        assert_eq!(s.unanswered(at(15), false), Duration::from_secs(5));
        // A long gap (the server was stopped) counts at most MAX_SILENT_STEP.
        assert_eq!(s.unanswered(at(300), false), Duration::from_secs(35));
        s.answered();
        assert_eq!(s.unanswered(at(301), false), Duration::ZERO);
    }
}
