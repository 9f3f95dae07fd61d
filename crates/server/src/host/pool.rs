//! The warm pool: per template, a few sandboxes restored from the template image ahead of
//! time, so a create only has to claim one (a store write and an event: a few ms) instead of
//! restoring (~200-300 ms here). A claimed instance is replaced in the background. Pooled
//! instances belong to no sandbox row, so after a crash the start-up orphan sweep destroys them.

use super::{CreateSpec, Host, Live};
use crate::error::ApiError;
use crate::guest::GuestConn;
use crate::state::SandboxState;
use pandastack_engine::SandboxSpec;

use pandastack_templates::TemplateInfo;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{debug, warn};

/// One pre-restored instance.
pub struct Pooled {
    spec: SandboxSpec,
    conn: GuestConn,
    network: Option<pandastack_engine::InstanceNetwork>,
    /// Template build and guest dir it was restored from.
    image: String,
}

/// Pooled instances by template name, plus which templates are being refilled.
#[derive(Default)]
pub struct Pool {
    ready: Mutex<HashMap<String, Vec<Pooled>>>,
    refilling: Mutex<std::collections::HashSet<String>>,
    /// Set at shutdown: no more refills.
    closed: std::sync::atomic::AtomicBool,
}

impl Host {
    /// Claims a pooled instance of `tpl` for a new sandbox, if one is ready.
    pub(super) async fn create_from_pool(
        self: &Arc<Self>,
        spec: &CreateSpec,
        tpl: &TemplateInfo,
        started: Instant,
    ) -> Option<Result<Arc<Live>, ApiError>> {
        let image = self.ready_template_image(tpl)?.display().to_string();
        let pooled = loop {
            let candidate = self
                .pool
                .ready
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(&tpl.name)
                .and_then(Vec::pop);
            let Some(p) = candidate else { break None };
            if p.image == image && p.conn.is_alive() {
                break Some(p);
            }
            // Stale (template re-baked, guest upgraded) or dead: discard it.
            let _ = self.engine.destroy(&p.spec.instance_id, &p.spec.dir).await;
        };
        self.refill_pool(tpl.clone());
        let p = pooled?;
        let mut row = spec.row(
            &tpl.name,
            tpl.generation as i64,
            (tpl.cpu, tpl.memory_mb),
            (
                tpl.rootfs.display().to_string(),
                self.cfg.guest_dir.display().to_string(),
            ),
            "snapshot",
            None,
        );
        row.instance_id = Some(p.spec.instance_id.clone());
        row.instance_dir = Some(p.spec.dir.display().to_string());
        row.guest_ip = p.network.map(|n| n.guest_ip.to_string());
        // Pooled instances run under the server's default policy; a create that asked for
        // another one gets it before the sandbox is handed out.
        if let (Some(want), true) = (&spec.network, spec.network != p.spec.network) {
            if let Err(e) = self
                .engine
                .set_network_policy(&p.spec.instance_id, want)
                .await
            {
                let _ = self.engine.destroy(&p.spec.instance_id, &p.spec.dir).await;
                return Some(Err(ApiError::internal("network policy", e)));
            }
        }
        row.boot_ms = Some(started.elapsed().as_millis() as i64);
        if let Err(e) = self.store.put_sandbox(&row) {
            let _ = self.engine.destroy(&p.spec.instance_id, &p.spec.dir).await;
            return Some(Err(e.into()));
        }
        let live = Arc::new(Live::new(row));
        live.set_conn(p.conn).await;
        self.insert(live.clone());
        Some(
            self.set_state(&live, SandboxState::Running, "create")
                .await
                .map(|()| live),
        )
    }

    /// Tops up `tpl`'s pool to the configured size in the background (one restore at a time).
    pub fn refill_pool(self: &Arc<Self>, tpl: TemplateInfo) {
        if self.cfg.pool_size == 0
            || self.pool.closed.load(std::sync::atomic::Ordering::SeqCst)
            || !self
                .pool
                .refilling
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(tpl.name.clone())
        {
            return;
        }
        let host = self.clone();
        tokio::spawn(async move {
            loop {
                let have = host
                    .pool
                    .ready
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&tpl.name)
                    .map_or(0, Vec::len);
                if have >= host.cfg.pool_size
                    || host.pool.closed.load(std::sync::atomic::Ordering::SeqCst)
                {
                    break;
                }
                let Some(image) = host.ready_template_image(&tpl) else {
                    break;
                };
                let spec = host.instance_spec(
                    &tpl.rootfs.display().to_string(),
                    &host.cfg.guest_dir.display().to_string(),
                    tpl.cpu,
                    tpl.memory_mb,
                    host.cfg.default_network_policy(),
                );
                let restored = async {
                    let inst = host
                        .engine
                        .restore(&spec, &image)
                        .await
                        .map_err(|e| e.to_string())?;
                    let conn = GuestConn::connect(&inst.guest_socket, Duration::from_secs(20))
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>((conn, inst.network))
                }
                .await;
                match restored {
                    Ok((conn, network)) => {
                        debug!(template = %tpl.name, instance_id = %spec.instance_id, "pooled instance ready");
                        host.pool
                            .ready
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .entry(tpl.name.clone())
                            .or_default()
                            .push(Pooled {
                                spec,
                                conn,
                                network,
                                image: image.display().to_string(),
                            });
                    }
                    Err(e) => {
                        warn!(template = %tpl.name, error = %e, "pool restore failed");
                        let _ = host.engine.destroy(&spec.instance_id, &spec.dir).await;
                        break;
                    }
                }
            }
            host.pool
                .refilling
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&tpl.name);
        });
    }
}

impl Host {
    /// Graceful stop: destroys the warm pool (waiting for refills in progress) and lets the
    /// engine drop what it made ahead of time. Sandboxes keep running; the next start
    /// re-adopts them.
    pub async fn shutdown(&self) {
        use std::sync::atomic::Ordering;
        self.pool.closed.store(true, Ordering::SeqCst);
        while !self
            .pool
            .refilling
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pooled: Vec<Pooled> =
            std::mem::take(&mut *self.pool.ready.lock().unwrap_or_else(|e| e.into_inner()))
                .into_values()
                .flatten()
                .collect();
        futures::future::join_all(
            pooled
                .iter()
                .map(|p| self.engine.destroy(&p.spec.instance_id, &p.spec.dir)),
        )
        .await;
        self.teardowns.close();
        if tokio::time::timeout(Duration::from_secs(60), self.teardowns.wait())
            .await
            .is_err()
        {
            warn!("stopping: some instance teardowns did not finish within 60 s");
        }
        let mut remain = false;
        for live in self.all() {
            remain |= live.row.lock().await.instance_id.is_some();
        }
        self.engine.shutdown(remain).await;
    }
}
