//! The memory watch (issue 11: idle CPU). The host samples the memory cgroup of every running
//! sandbox and warm-pool instance every [`PERIOD`] and tells its guest whether it may stop
//! looking at its memory itself.
//!
//! The guest's memory guard (`pandastack_guest::memory`) must kill a process before the
//! sandbox's use reaches the host's limit, so it looks at `/proc/meminfo` 2-4 times a second.
//! Under ptrace each look is a wake-up of an idle sandbox that costs ~0.5 ms of host CPU: ~75 %
//! of an idle sandbox's CPU (measured here: 0.34 % of a core for an idle `base` sandbox, 0.017
//! % for runsc running only `sleep`). Reading a cgroup file on the host costs microseconds. So
//! while the cgroup's use is below [`NEAR_PERCENT`] of `memory_mb`, the host grants the guard
//! a lease of [`LEASE_MS`] (in a `Ping`; renewed by every health probe, every 5 s) and the
//! guard sleeps; when the use crosses it, the host takes the lease back at once (a `Ping` with
//! lease 0) and the guard looks as before, until the use is below [`FAR_PERCENT`] again.
//!
//! Why that is safe: the cgroup's use counts all the sandbox's own use does (its memory file)
//! plus the sentry's, so it never reads lower. From half of `memory_mb` to the guard's mark
//! (`memory_mb` less 1/32) the fastest allocation the guard plans for (2 MiB/ms) needs more than
//! 100 ms at 512 MiB, longer than a [`PERIOD`] and a message; and the host's limit sits a
//! headroom (480 MiB at 512) above the mark. A guest whose host stops renewing (the server is
//! gone) looks for itself again when its lease ends.

use super::{Host, Live};
use crate::guest::GuestConn;
use pandastack_guest_protocol::{GuestMsg, HostMsg};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the host samples every instance's memory cgroup.
pub const PERIOD: Duration = Duration::from_millis(100);
/// From this share of `memory_mb` in use (the cgroup's count) the guard looks for itself, %.
pub const NEAR_PERCENT: u64 = 50;
/// Below this share the host grants the lease again, % (between the two, what was found last
/// stands).
pub const FAR_PERCENT: u64 = 40;
/// How long one grant lets the guard sleep, ms: three health-probe periods, so a probe or two
/// that cannot run (a lifecycle operation holds the sandbox) do not end it.
pub const LEASE_MS: u64 = 15_000;
/// How often a warm-pool instance (which no health probe renews) gets its lease again.
const POOL_RENEW: Duration = Duration::from_secs(5);
/// How long a guest has to answer the `Ping` that carries a change.
const PING_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether `used` bytes of a sandbox of `memory_mb` MiB are near its limit, given what was
/// found last (`None`: nothing yet, which counts as near between the two marks).
pub fn is_near(used: u64, memory_mb: u32, before: Option<bool>) -> bool {
    let limit = u64::from(memory_mb) << 20;
    if used * 100 >= limit * NEAR_PERCENT {
        true
    } else if used * 100 < limit * FAR_PERCENT {
        false
    } else {
        before.unwrap_or(true)
    }
}

/// The lease a `Ping` carries for a finding: [`LEASE_MS`] when far, 0 (taken back) when near.
pub fn lease_ms(near: bool) -> u64 {
    if near {
        0
    } else {
        LEASE_MS
    }
}

impl Host {
    /// Spawns the memory watch (see the module doc).
    pub fn spawn_memory_watch(self: &Arc<Self>) {
        let host = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut pooled: HashMap<String, (bool, Instant)> = HashMap::new();
            loop {
                tick.tick().await;
                for live in host.all() {
                    host.watch_memory(&live).await;
                }
                host.watch_pooled_memory(&mut pooled);
            }
        });
    }

    /// Samples `live`'s instance and, when the finding changed (or is its first), tells its
    /// guest. A lifecycle operation in progress owns the instance: looked at next round.
    async fn watch_memory(self: &Arc<Self>, live: &Arc<Live>) {
        if live.gate.try_read().is_err() {
            return;
        }
        let (status, iid, memory_mb) = {
            let r = live.row.lock().await;
            (r.status.clone(), r.instance_id.clone(), r.memory_mb)
        };
        let Some(iid) = iid.filter(|_| status == "running") else {
            return;
        };
        let Some(used) = self.engine.memory_used(&iid) else {
            return;
        };
        let near = is_near(used, memory_mb, live.memory_near(&iid));
        if live.set_memory_near(&iid, near) == Some(near) {
            return;
        }
        let (host, live) = (self.clone(), live.clone());
        tokio::spawn(async move {
            let sent = match live.probe_conn(super::health::FIRST_TIMEOUT).await {
                Ok(Some(conn)) => match ping(&conn, near).await {
                    Some(GuestMsg::Pong { oom_kills, .. }) => {
                        // The kills a Pong carries are reported once: record them here.
                        host.record_oom_kills(&live, &oom_kills).await;
                        true
                    }
                    _ => false,
                },
                _ => false,
            };
            if !sent {
                // Not told: found again (and sent again) next round.
                live.forget_memory_near(&iid);
            }
        });
    }

    /// Samples the warm pool's instances and grants each its lease, again every
    /// [`POOL_RENEW`] (no health probe renews them). `seen` holds the last finding and when it
    /// was sent, per instance.
    fn watch_pooled_memory(&self, seen: &mut HashMap<String, (bool, Instant)>) {
        let guests = self.pooled_guests();
        seen.retain(|iid, _| guests.iter().any(|(i, ..)| i == iid));
        let now = Instant::now();
        for (iid, memory_mb, conn) in guests {
            let Some(used) = self.engine.memory_used(&iid) else {
                continue;
            };
            let before = seen.get(&iid).copied();
            let near = is_near(used, memory_mb, before.map(|(n, _)| n));
            let due =
                before.is_none_or(|(n, at)| n != near || now.duration_since(at) >= POOL_RENEW);
            if due {
                seen.insert(iid, (near, now));
                tokio::spawn(async move {
                    let _ = ping(&conn, near).await;
                });
            }
        }
    }
}

/// Sends a `Ping` carrying the lease for `near` and returns the answer (None: none within
/// [`PING_TIMEOUT`]).
async fn ping(conn: &GuestConn, near: bool) -> Option<GuestMsg> {
    let call = conn.call(HostMsg::Ping {
        id: conn.new_id(),
        memory_lease_ms: Some(lease_ms(near)),
    });
    match tokio::time::timeout(PING_TIMEOUT, call).await {
        Ok(Ok((msg, _))) => Some(msg),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_from_half_far_below_two_fifths_and_between_what_was_found() {
        let mib = 1u64 << 20;
        assert!(is_near(256 * mib, 512, Some(false)), "half is near");
        assert!(
            !is_near(204 * mib, 512, Some(true)),
            "under two fifths is far"
        );
        assert!(is_near(230 * mib, 512, Some(true)), "between: stays near");
        assert!(!is_near(230 * mib, 512, Some(false)), "between: stays far");
        assert!(
            is_near(230 * mib, 512, None),
            "between, nothing found yet: near"
        );
        assert!(!is_near(100 * mib, 1024, None));
        assert_eq!((lease_ms(true), lease_ms(false)), (0, LEASE_MS));
    }
}
