//! The sweepers (seed 003 "TTL and persistence"): a non-persistent sandbox whose last API
//! activity is older than its `ttl_seconds` is destroyed; a persistent running sandbox idle for
//! longer than the idle period (default 5 minutes) is hibernated and wakes on its next request.
//! They run every 250 ms, so a sandbox is gone well within 2 s of expiry. A request in flight
//! (a running command, a code run, a file or exec stream: [`super::Live::activity`]) is
//! activity, so neither takes a sandbox in the middle of one (issue 8).

use super::Host;
use pandastack_store::now_ms;
use std::sync::Arc;
use std::time::Duration;
use tracing::info;

/// Sweep period.
const PERIOD: Duration = Duration::from_millis(250);

impl Host {
    /// Spawns the sweeper task.
    pub fn spawn_sweepers(self: &Arc<Self>) {
        let host = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PERIOD);
            let mut n: u64 = 0;
            loop {
                tick.tick().await;
                host.sweep_ttl().await;
                host.sweep_idle().await;
                n += 1;
                if n.is_multiple_of(40) {
                    host.trim_pools().await;
                    host.engine.trim_targets();
                    host.sweep_object_cache().await;
                    host.sweep_fetched_builds().await;
                }
            }
        });
    }

    async fn sweep_ttl(&self) {
        let now = now_ms();
        for live in self.all() {
            let expired = {
                let r = live.row.lock().await;
                !r.persistent
                    && r.status != "deleted"
                    && now - r.last_active_at > r.ttl_seconds * 1000
                    && !live.is_active()
            };
            if expired {
                info!(sandbox_id = %live.id, "ttl expired");
                if let Err(e) = self.destroy(&live, "ttl").await {
                    tracing::warn!(sandbox_id = %live.id, error = %e, "ttl kill");
                }
            }
        }
    }

    async fn sweep_idle(self: &Arc<Self>) {
        let now = now_ms();
        let limit = self.cfg.idle_hibernate_seconds * 1000;
        for live in self.all() {
            let idle = {
                let r = live.row.lock().await;
                r.persistent
                    && r.status == "running"
                    && now - r.last_active_at > limit
                    && !live.is_active()
            };
            if idle {
                info!(sandbox_id = %live.id, "idle persistent sandbox: hibernating");
                if let Err(e) = self.hibernate(&live, "idle").await {
                    tracing::warn!(sandbox_id = %live.id, error = %e, "idle hibernate");
                    // Try again after another idle period, not every sweep (a full disk
                    // would otherwise be retried four times a second).
                    live.touch().await;
                }
            }
        }
    }
}
