//! Several hosts, one control plane (issue 12; seed 003 "Lease semantics").
//!
//! Every `pandastack server` is a host. Hosts sharing one PostgreSQL store form a cluster:
//!
//! - **Heartbeats**: each host writes its row in `hosts` every [`HEARTBEAT`] with its
//!   [`HostLoad`]; a host whose last heartbeat is older than [`DOWN_AFTER_MS`] (database clock)
//!   is `down`.
//! - **Leases**: a running or paused sandbox holds a lease (taken and dropped with its state,
//!   `Host::set_state`), renewed in bulk every [`RENEW`]; it expires [`LEASE_TTL_MS`] after the
//!   last renewal. Every host collects expired leases every [`EXPIRE`]: the sandbox becomes
//!   `failed` with cause `lease expired (host NAME)`. A host that finds a lease of its own not
//!   renewed destroys its instance ([`Host::fence`]): a sandbox never runs on two hosts.
//! - **Events**: every host's events are in the store; a relay per host broadcasts them to this
//!   host's `/v1/events` subscribers in the store's order, woken by PostgreSQL `NOTIFY` (and a
//!   poll as the fallback).
//! - **Placement and forwarding**: [`place`] picks the host of a create; [`forward`] relays a
//!   request for a sandbox that lives on another host to it.
//!
//! With SQLite (one host) only the heartbeat runs (so `GET /v1/hosts` shows the host); the
//! store belongs wholly to this host.

pub mod drain;
pub mod forward;
pub mod place;

use crate::host::{Host, HostLoad, LEASE_TTL_MS};
use pandastack_store::{Backend, HostRow, Store};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// How often a host records its heartbeat (issue 12: every 5-10 s).
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// A host whose last heartbeat is older than this is `down`, ms.
pub const DOWN_AFTER_MS: i64 = 20_000;

/// How often a relay waiting for another host's answer checks whether that host went down.
pub const GONE_POLL: std::time::Duration = std::time::Duration::from_secs(2);
/// How often a host renews its leases (seed 003: every 10 s).
pub const RENEW: Duration = Duration::from_secs(10);
/// How often a host collects expired leases.
pub const EXPIRE: Duration = Duration::from_secs(5);
/// How long the event relay waits for a notification before polling the store anyway.
const RELAY_POLL: Duration = Duration::from_secs(1);
/// How many sequence numbers below the highest seen the event relay reads again.
const RELAY_WINDOW: i64 = 64;
/// The PostgreSQL notification channel of new events (the trigger of store migration 1).
pub const EVENTS_CHANNEL: &str = "pandastack_events";
/// Request header naming the host that relayed a request; with [`NODE_TOKEN_HEADER`] it tells
/// the receiver to serve it itself.
pub const FORWARDED_HEADER: &str = "x-pandastack-forwarded-by";
/// Request header carrying the cluster's node token on host-to-host requests.
pub const NODE_TOKEN_HEADER: &str = "x-pandastack-node-token";
/// The store setting holding the node token when `PANDASTACK_NODE_TOKEN` is not set.
pub const NODE_TOKEN_SETTING: &str = "node_token";

/// This host's identity in the cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// `--host-name` (default: the machine's hostname).
    pub host_name: String,
    /// `--advertise-url`: how the other hosts reach this host's API, e.g. `http://10.0.0.5:8080`.
    pub advertise_url: String,
    /// The secret every host-to-host request carries (`PANDASTACK_NODE_TOKEN`, or one the
    /// first host stored in the shared store). Compared in constant time.
    pub node_token: String,
    /// Whether the store is shared (PostgreSQL): leases, the relay, placement and forwarding
    /// run only then.
    pub shared: bool,
}

/// A host as the API shows it (`GET /v1/hosts`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct HostView {
    pub name: String,
    pub advertise_url: String,
    /// `active`, `draining` or `down` (no heartbeat for 20 s, [`DOWN_AFTER_MS`]).
    pub state: String,
    /// RFC 3339 of the last heartbeat.
    pub last_heartbeat: String,
    /// Age of the last heartbeat, ms (database clock).
    pub heartbeat_age_ms: i64,
    /// The load it reported (`HostLoad` fields), or null before its first heartbeat.
    #[schema(value_type = Option<HostLoad>)]
    pub capacity: serde_json::Value,
}

/// Whether `h` is down: no heartbeat for [`DOWN_AFTER_MS`].
pub fn is_down(h: &HostRow) -> bool {
    h.now_ms - h.heartbeat_at > DOWN_AFTER_MS
}

impl HostView {
    /// The API view of a host row.
    pub fn of(h: &HostRow) -> Self {
        HostView {
            name: h.name.clone(),
            advertise_url: h.advertise_url.clone(),
            state: if is_down(h) {
                "down".into()
            } else {
                h.state.clone()
            },
            last_heartbeat: crate::api::rfc3339(h.heartbeat_at),
            heartbeat_age_ms: h.now_ms - h.heartbeat_at,
            capacity: h.capacity.clone(),
        }
    }
}

/// The cluster side of a host: its identity, the HTTP client it relays with, and placements
/// in flight. Shared as `Arc<Cluster>`.
pub struct Cluster {
    pub cfg: ClusterConfig,
    store: Arc<Store>,
    /// Placements this host made and their hosts have not yet shown in their load (see
    /// [`Claims`]).
    claims: std::sync::Mutex<Claims>,
}

/// The placements a host made that the loads it reads do not show yet, so that concurrent
/// and back-to-back creates spread before the next heartbeat reports them.
#[derive(Debug, Default)]
pub struct Claims {
    /// Per host: placements made and not yet answered (this host's own included: its live
    /// load shows a create only once its admission reserved it).
    in_flight: std::collections::HashMap<String, usize>,
    /// Sandboxes another host made for this host's placements, with when: counted until that
    /// host's heartbeat is newer than the answer (its load then shows them).
    answered: Vec<(String, std::time::Instant, usize)>,
}

impl Claims {
    /// The sandboxes placed on `h` its load does not show: in flight, plus (for another
    /// host) those it answered after its last heartbeat.
    pub fn pending(&self, h: &HostRow, here: bool) -> usize {
        let flying = self.in_flight.get(&h.name).copied().unwrap_or(0);
        if here {
            return flying;
        }
        let heartbeat_age = u128::try_from(h.now_ms - h.heartbeat_at).unwrap_or(0);
        flying
            + self
                .answered
                .iter()
                .filter(|(name, at, _)| *name == h.name && at.elapsed().as_millis() < heartbeat_age)
                .map(|(_, _, n)| n)
                .sum::<usize>()
    }
}

impl Cluster {
    /// The cluster side of this host.
    pub fn new(cfg: ClusterConfig, store: Arc<Store>) -> Arc<Self> {
        Arc::new(Cluster {
            cfg,
            store,
            claims: Default::default(),
        })
    }

    /// Whether a request carries this cluster's node token (constant-time compare).
    pub fn is_node(&self, headers: &axum::http::HeaderMap) -> bool {
        headers.get(NODE_TOKEN_HEADER).is_some_and(|v| {
            crate::auth::constant_time_eq(v.as_bytes(), self.cfg.node_token.as_bytes())
        })
    }

    /// Every registered host.
    ///
    /// # Errors
    /// Store errors.
    pub async fn hosts(&self) -> Result<Vec<HostRow>, pandastack_store::StoreError> {
        self.store.hosts().await
    }

    /// Completes (with why) once host `name` is down or no longer registered, looking every
    /// [`GONE_POLL`]; a store error counts as not gone (the next look decides). What a relay to
    /// that host waits on besides its answer.
    pub async fn gone(&self, name: &str) -> String {
        loop {
            tokio::time::sleep(GONE_POLL).await;
            match self.hosts().await {
                Ok(hosts) => match hosts.iter().find(|h| h.name == name) {
                    Some(h) if !is_down(h) => {}
                    Some(_) => return format!("host {name} went down"),
                    None => return format!("host {name} left the cluster"),
                },
                Err(e) => debug!(error = %e, "looking up hosts"),
            }
        }
    }

    /// Starts the background tasks: the heartbeat always; with a shared store also the lease
    /// renewer, the lease collector and the event relay. Records the first heartbeat before
    /// returning, so this host is placeable once the server serves.
    ///
    /// # Errors
    /// Store errors of the first heartbeat.
    pub async fn start(
        self: &Arc<Self>,
        host: &Arc<Host>,
        db_url: Option<String>,
    ) -> Result<(), pandastack_store::StoreError> {
        let load = serde_json::to_value(host.load().await).unwrap_or_default();
        self.store
            .heartbeat(&self.cfg.host_name, &self.cfg.advertise_url, &load, true)
            .await?;
        info!(host = %self.cfg.host_name, advertise_url = %self.cfg.advertise_url, shared = self.cfg.shared, "host registered");
        let (me, h) = (self.clone(), host.clone());
        tokio::spawn(async move { me.heartbeats(h).await });
        if !self.cfg.shared {
            return Ok(());
        }
        let (me, h) = (self.clone(), host.clone());
        tokio::spawn(async move { me.renew_leases(h).await });
        let (me, h) = (self.clone(), host.clone());
        tokio::spawn(async move { me.collect_leases(h).await });
        let (me, h) = (self.clone(), host.clone());
        let from = self.store.last_event_seq().await?;
        tokio::spawn(async move { me.relay_events(h, db_url, from).await });
        Ok(())
    }

    async fn heartbeats(&self, host: Arc<Host>) {
        let mut tick = tokio::time::interval(HEARTBEAT);
        tick.tick().await;
        loop {
            tick.tick().await;
            let load = serde_json::to_value(host.load().await).unwrap_or_default();
            if let Err(e) = self
                .store
                .heartbeat(&self.cfg.host_name, &self.cfg.advertise_url, &load, false)
                .await
            {
                warn!(error = %e, "heartbeat");
            }
        }
    }

    /// Renews this host's leases every [`RENEW`] and fences every sandbox that was running here
    /// before the renewal and whose lease was not renewed.
    async fn renew_leases(&self, host: Arc<Host>) {
        let mut tick = tokio::time::interval(RENEW);
        loop {
            tick.tick().await;
            // Read before renewing: a sandbox that starts running after this read took its
            // lease itself and is judged next round.
            let mut holding = Vec::new();
            for live in host.all() {
                let r = live.row.lock().await;
                if matches!(r.status.as_str(), "running" | "paused") {
                    holding.push(live.clone());
                }
            }
            let renewed: BTreeSet<String> = match self
                .store
                .renew_leases(&self.cfg.host_name, LEASE_TTL_MS)
                .await
            {
                Ok(ids) => ids.into_iter().collect(),
                Err(e) => {
                    // Without the store no lease is renewed, and none can be judged lost.
                    warn!(error = %e, "renewing leases");
                    continue;
                }
            };
            for live in holding {
                if !renewed.contains(&live.id) {
                    host.fence(&live).await;
                }
            }
        }
    }

    /// Collects expired leases of any host every [`EXPIRE`]; a sandbox of this host among
    /// them is fenced at once.
    async fn collect_leases(&self, host: Arc<Host>) {
        let mut tick = tokio::time::interval(EXPIRE);
        loop {
            tick.tick().await;
            match self.store.expire_leases(100).await {
                Ok(events) => {
                    for ev in events {
                        warn!(sandbox_id = %ev.sandbox_id, cause = %ev.cause, "sandbox failed");
                        if let Some(live) = host.get_any(&ev.sandbox_id) {
                            host.fence(&live).await;
                        }
                    }
                }
                Err(e) => warn!(error = %e, "collecting expired leases"),
            }
        }
    }

    /// Broadcasts every event the store records (this host's and the others') to this host's
    /// subscribers, in sequence order. Woken by `NOTIFY` on [`EVENTS_CHANNEL`]; polls every
    /// [`RELAY_POLL`] regardless (a notification lost with a broken connection delays an event
    /// by at most that).
    async fn relay_events(&self, host: Arc<Host>, db_url: Option<String>, start: i64) {
        let (mut last, mut sent) = (start, BTreeSet::new());
        let mut listener = match db_url.as_deref() {
            Some(url) if self.store.backend() == Backend::Postgres => listen(url)
                .await
                .map_err(|e| warn!(error = %e, "LISTEN for events"))
                .ok(),
            _ => None,
        };
        loop {
            match listener.as_mut() {
                Some(l) => {
                    let _ = tokio::time::timeout(RELAY_POLL, l.recv()).await;
                }
                None => tokio::time::sleep(RELAY_POLL / 4).await,
            }
            // Sequence numbers are taken at insert but become visible at commit, so a lower
            // one can appear after a higher one: the last RELAY_WINDOW are read again, and
            // what was sent is remembered so nothing goes out twice.
            loop {
                let floor = (last - RELAY_WINDOW).max(start);
                match self.store.events_after(floor, 500).await {
                    Ok(events) => {
                        let n = events.len();
                        for e in events {
                            last = last.max(e.seq);
                            if sent.insert(e.seq) {
                                let _ = host.events.send(e);
                            }
                        }
                        let floor = (last - RELAY_WINDOW).max(start);
                        sent.retain(|s| *s > floor);
                        if n < 500 {
                            break;
                        }
                    }
                    Err(e) => {
                        debug!(error = %e, "reading events");
                        break;
                    }
                }
            }
        }
    }

    /// The placements not yet shown in the hosts' loads, locked: [`place`] scores and claims
    /// under one lock, so concurrent creates see each other's choices.
    pub fn claims(&self) -> std::sync::MutexGuard<'_, Claims> {
        self.claims.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a placement of `sandboxes` sandboxes on `host` until the returned guard drops.
    pub fn claim(self: &Arc<Self>, host: &str, sandboxes: usize) -> Placing {
        self.claim_in(&mut self.claims(), host, sandboxes)
    }

    /// [`Cluster::claim`] in `claims`, this cluster's [`Claims`] already locked.
    pub fn claim_in(
        self: &Arc<Self>,
        claims: &mut Claims,
        host: &str,
        sandboxes: usize,
    ) -> Placing {
        *claims.in_flight.entry(host.to_string()).or_default() += sandboxes;
        Placing {
            cluster: self.clone(),
            host: host.to_string(),
            sandboxes,
            answered: false,
        }
    }
}

/// A placement in flight to a host (see [`Cluster::claim`]): counted in that host's load
/// until it drops; marked [`answered`](Placing::answered) by another host, until that host's
/// next heartbeat.
pub struct Placing {
    cluster: Arc<Cluster>,
    host: String,
    sandboxes: usize,
    answered: bool,
}

impl Placing {
    /// The host made the sandbox (a 2xx answer): it counts until that host's next heartbeat
    /// shows it. This host's own creates show in its live load at once.
    pub fn answered(mut self) {
        self.answered = self.host != self.cluster.cfg.host_name;
    }
}

impl Drop for Placing {
    fn drop(&mut self) {
        let mut c = self.cluster.claims();
        if let Some(n) = c.in_flight.get_mut(&self.host) {
            *n = n.saturating_sub(self.sandboxes);
        }
        // A heartbeat comes every HEARTBEAT; older answers are in the loads (or the host is down).
        let horizon = Duration::from_millis(DOWN_AFTER_MS.unsigned_abs());
        c.answered.retain(|(_, at, _)| at.elapsed() < horizon);
        if self.answered {
            c.answered
                .push((self.host.clone(), std::time::Instant::now(), self.sandboxes));
        }
    }
}

/// A PostgreSQL connection listening on [`EVENTS_CHANNEL`].
async fn listen(url: &str) -> Result<sqlx::postgres::PgListener, sqlx::Error> {
    let mut l = sqlx::postgres::PgListener::connect(url).await?;
    l.listen(EVENTS_CHANNEL).await?;
    Ok(l)
}

/// The load a host reported, if it parses.
pub fn load_of(h: &HostRow) -> Option<HostLoad> {
    serde_json::from_value(h.capacity.clone()).ok()
}
