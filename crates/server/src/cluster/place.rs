//! The scheduler (issue 12 point 4): which host a create lands on.
//!
//! - A placement hint (`"host": NAME` in the create body, REST only) wins; the host must exist
//!   (else 400 naming the field) and be up, active and have room (else 503).
//! - A create `from_snapshot` of an image not in object storage goes to the host whose disk
//!   holds it; 503 when that host is down. One in object storage (issue 12 point 6) goes
//!   anywhere, preferring the host that holds it on disk (no fetch).
//! - Otherwise: the least-loaded active host that has the template and room (committed memory
//!   against its budget, sandbox count against its limit), counting the creates this host has
//!   placed there that its load does not show yet, preferring a host with a warm-pool
//!   instance of the template; this host on a tie. None has room: 503 with `Retry-After`.
//!
//! This host's own load is read live; the others' come from their last heartbeat. What a
//! load does not show yet is counted from this host's claims ([`super::Claims`]): every
//! placement until its create is answered (this host's own included: its admission reserves
//! a place only later), and a create another host answered until that host's next heartbeat.
//! Scoring and claiming happen under one lock, so 20 concurrent creates spread.

use super::{is_down, load_of, Claims, Cluster, Placing};
use crate::error::ApiError;
use crate::host::{Host, HostLoad, RETRY_AFTER_S};
use pandastack_store::HostRow;
use std::sync::Arc;

/// Where a create goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// This host.
    Here,
    /// Another host: forward the create to it.
    There(HostRow),
}

/// What a create needs of a host.
#[derive(Debug, Clone)]
pub struct Need<'a> {
    /// Template name.
    pub template: &'a str,
    /// Memory limit of the new sandbox, MiB (of all of them, for several).
    pub memory_mb: u32,
    /// How many sandboxes (a fork tree's children go to one host together), at least 1.
    pub sandboxes: usize,
    /// The placement hint of the body (`host`).
    pub hint: Option<&'a str>,
    /// The host holding the snapshot image of a `from_snapshot` create (which must serve it).
    pub image_host: Option<&'a str>,
    /// A host that serves the create best (it has the image on disk), if it has room.
    pub prefer: Option<&'a str>,
}

impl<'a> Need<'a> {
    /// `count` copies of an existing sandbox (fork children, a drained sandbox) on one host:
    /// its template, `count` times its memory (MiB), no hint, no image host.
    pub fn like(template: &'a str, memory_mb: u32, count: usize) -> Self {
        Need {
            template,
            memory_mb: memory_mb.saturating_mul(u32::try_from(count).unwrap_or(u32::MAX)),
            sandboxes: count.max(1),
            hint: None,
            image_host: None,
            prefer: None,
        }
    }
}

/// Picks the host of a create (see the module doc) and claims a place there: the returned
/// guard counts the create in that host's load until it drops (hold it until the create is
/// answered; mark a 2xx answer of another host with [`Placing::answered`]).
///
/// # Errors
/// 400 for a hint naming no host; 503 (with `Retry-After`) when the hinted or image host is
/// down, draining or full, or no host has room; store errors.
pub async fn place(
    cluster: &Arc<Cluster>,
    host: &Host,
    need: &Need<'_>,
) -> Result<(Placement, Placing), ApiError> {
    let me = cluster.cfg.host_name.as_str();
    if !cluster.cfg.shared {
        return match need.hint {
            Some(h) if h != me => Err(ApiError::BadRequest(format!(
                "host: no host named '{h}' (this server is the only host)"
            ))),
            _ => Ok((Placement::Here, cluster.claim(me, need.sandboxes))),
        };
    }
    let hosts = cluster.hosts().await?;
    let mine = host.load().await;
    // Scored and claimed under one lock of the claims, so concurrent creates see each other.
    let mut claims = cluster.claims();
    let placement = choose(me, &hosts, &mine, &claims, need)?;
    let on = match &placement {
        Placement::Here => me,
        Placement::There(h) => h.name.as_str(),
    };
    let claim = cluster.claim_in(&mut claims, on, need.sandboxes);
    Ok((placement, claim))
}

/// The choice of [`place`] on host `me` over `hosts` (this host's load: `mine`), counting
/// what `claims` says their loads do not show yet.
fn choose(
    me: &str,
    hosts: &[HostRow],
    mine: &HostLoad,
    claims: &Claims,
    need: &Need<'_>,
) -> Result<Placement, ApiError> {
    let unavailable = |h: &HostRow, why: &str| ApiError::Busy {
        message: format!("host {} {why}; retry later", h.name),
        retry_after_s: RETRY_AFTER_S,
    };
    let fixed = need.hint.or(need.image_host);
    if let Some(name) = fixed {
        let Some(h) = hosts.iter().find(|h| h.name == name) else {
            return match need.hint {
                Some(_) => Err(ApiError::BadRequest(format!(
                    "host: no host named '{name}'"
                ))),
                // The image's host left the cluster for good: the image went with it.
                None => Err(ApiError::Conflict(format!(
                    "the host holding this snapshot ({name}) is no longer in the cluster"
                ))),
            };
        };
        // A draining host takes nothing new, this one included.
        if h.state != "active" {
            return Err(unavailable(h, "is draining"));
        }
        if h.name == me {
            return Ok(Placement::Here);
        }
        if is_down(h) {
            return Err(unavailable(h, "is down"));
        }
        return Ok(Placement::There(h.clone()));
    }
    let mut best: Option<(f64, &HostRow)> = None;
    for h in hosts {
        if h.state != "active" || is_down(h) {
            continue;
        }
        let here = h.name == me;
        let Some(load) = (if here { Some(mine.clone()) } else { load_of(h) }) else {
            continue;
        };
        let Some(mut score) = score(&load, claims.pending(h, here), need) else {
            continue;
        };
        if need.prefer == Some(h.name.as_str()) {
            score -= 0.5;
        }
        // Ties go to this host (no hop).
        let better = match best {
            None => true,
            Some((s, b)) => score < s || (score == s && here && b.name != me),
        };
        if better {
            best = Some((score, h));
        }
    }
    match best {
        Some((_, h)) if h.name == me => Ok(Placement::Here),
        Some((_, h)) => Ok(Placement::There(h.clone())),
        // The template is on no host (or every host is full): this host answers (404 for an
        // unknown template, 503 from its own admission when full).
        None if hosts
            .iter()
            .all(|h| load_of(h).is_none_or(|l| !l.templates.contains_key(need.template))) =>
        {
            Ok(Placement::Here)
        }
        None => Err(ApiError::Busy {
            message: "every host of the cluster is at capacity; retry later".into(),
            retry_after_s: RETRY_AFTER_S,
        }),
    }
}

/// A host's score for a create (lower is better), or `None` when it lacks the template or
/// room (`need.sandboxes` slots and `need.memory_mb`). `pending`: sandboxes placed there its
/// load does not show yet.
fn score(load: &HostLoad, pending: usize, need: &Need<'_>) -> Option<f64> {
    let pooled = *load.templates.get(need.template)?;
    let sandboxes = load.sandboxes + pending;
    // The pending sandboxes' sizes are not known here: each is taken as large as this one.
    let each_mb = u64::from(need.memory_mb) / need.sandboxes.max(1) as u64;
    let committed = load.committed_mb + pending as u64 * each_mb;
    if sandboxes + need.sandboxes.max(1) > load.max_sandboxes
        || committed + u64::from(need.memory_mb) > load.max_memory_mb
    {
        return None;
    }
    let memory = committed as f64 / load.max_memory_mb.max(1) as f64;
    let count = sandboxes as f64 / load.max_sandboxes.max(1) as f64;
    // A warm-pool instance not yet promised to a create makes the create a claim (~ms).
    let warm = if pooled > pending { -0.25 } else { 0.0 };
    Some(memory.max(count) + warm)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(sandboxes: usize, committed_mb: u64, pooled: usize) -> HostLoad {
        HostLoad {
            sandboxes,
            max_sandboxes: 10,
            committed_mb,
            max_memory_mb: 10_240,
            disk_free_bytes: 1 << 30,
            templates: [("base".to_string(), pooled)].into_iter().collect(),
        }
    }

    fn need() -> Need<'static> {
        Need {
            template: "base",
            memory_mb: 1024,
            sandboxes: 1,
            hint: None,
            image_host: None,
            prefer: None,
        }
    }

    #[test]
    fn the_emptier_host_and_a_warm_pool_score_better() {
        let (a, b) = (
            score(&load(1, 1024, 0), 0, &need()),
            score(&load(5, 5120, 0), 0, &need()),
        );
        assert!(a.unwrap() < b.unwrap());
        let warm = score(&load(5, 5120, 1), 0, &need()).unwrap();
        assert!(warm < b.unwrap());
        // A pool instance already promised to a create in flight does not count.
        assert_eq!(
            score(&load(5, 5120, 1), 1, &need()),
            score(&load(6, 6144, 0), 0, &need())
        );
    }

    /// A cluster of this host `a` and `b` (an in-memory store that `choose` never reads).
    async fn cluster() -> Arc<Cluster> {
        let store = Arc::new(pandastack_store::Store::open_in_memory().await.unwrap());
        let cfg = super::super::ClusterConfig {
            host_name: "a".into(),
            advertise_url: "http://127.0.0.1:1".into(),
            node_token: "t".into(),
            shared: true,
        };
        Cluster::new(cfg, store)
    }

    /// Host `name`'s row with `l` as its heartbeat's load, `age_ms` old.
    fn row(name: &str, l: &HostLoad, age_ms: i64) -> HostRow {
        HostRow {
            name: name.into(),
            advertise_url: format!("http://{name}"),
            state: "active".into(),
            capacity: serde_json::to_value(l).unwrap(),
            started_at: 0,
            heartbeat_at: 1_000_000 - age_ms,
            now_ms: 1_000_000,
        }
    }

    /// `choose` and its claim, as `place` does them under one lock.
    fn placed(c: &Arc<Cluster>, hosts: &[HostRow], mine: &HostLoad) -> (Placement, Placing) {
        let mut claims = c.claims();
        let p = choose("a", hosts, mine, &claims, &need()).unwrap();
        let on = match &p {
            Placement::Here => "a".to_string(),
            Placement::There(h) => h.name.clone(),
        };
        let claim = c.claim_in(&mut claims, &on, 1);
        (p, claim)
    }

    #[tokio::test]
    async fn concurrent_placements_alternate_between_equal_hosts() {
        let c = cluster().await;
        let idle = load(0, 0, 0);
        let hosts = [row("a", &idle, 100), row("b", &idle, 100)];
        // 20 creates placed before any is answered (claims held), as a burst does.
        let mut claims = Vec::new();
        for _ in 0..20 {
            claims.push(placed(&c, &hosts, &idle));
        }
        let on_b = claims
            .iter()
            .filter(|(p, _)| matches!(p, Placement::There(h) if h.name == "b"))
            .count();
        assert_eq!(
            on_b,
            10,
            "{:?}",
            claims.iter().map(|(p, _)| p).collect::<Vec<_>>()
        );
        // Answered creates of b count until b's heartbeat is newer than the answers.
        for (p, claim) in claims {
            if matches!(p, Placement::There(_)) {
                claim.answered();
            }
        }
        let b_then = row("b", &idle, 60_000);
        assert_eq!(c.claims().pending(&b_then, false), 10);
        let b_now = row("b", &idle, 0);
        assert_eq!(c.claims().pending(&b_now, false), 0);
        // This host's own creates are not counted once answered (its live load shows them).
        assert_eq!(c.claims().pending(&hosts[0], true), 0);
    }

    #[tokio::test]
    async fn a_dropped_claim_frees_its_place() {
        let c = cluster().await;
        let idle = load(0, 0, 0);
        let hosts = [row("a", &idle, 100), row("b", &idle, 100)];
        let (first, claim) = placed(&c, &hosts, &idle);
        assert_eq!(first, Placement::Here);
        let (second, _b) = placed(&c, &hosts, &idle);
        assert!(matches!(second, Placement::There(h) if h.name == "b"));
        // The create on a failed: a is the emptier host again.
        drop(claim);
        let (third, _) = placed(&c, &hosts, &idle);
        assert_eq!(third, Placement::Here);
    }

    #[test]
    fn a_full_host_or_one_without_the_template_is_no_candidate() {
        assert_eq!(score(&load(10, 1024, 0), 0, &need()), None);
        assert_eq!(score(&load(1, 9300, 0), 0, &need()), None);
        assert_eq!(score(&load(9, 1024, 0), 1, &need()), None);
        // A fork tree of 3 needs 3 slots on one host (memory alone would fit).
        let tree = Need::like("base", 100, 3);
        assert_eq!((tree.sandboxes, tree.memory_mb), (3, 300));
        assert_eq!(score(&load(8, 1024, 0), 0, &tree), None);
        assert!(score(&load(7, 1024, 0), 0, &tree).is_some());
        let other = Need {
            template: "code-interpreter",
            ..need()
        };
        assert_eq!(score(&load(0, 0, 0), 0, &other), None);
    }
}
