//! Live drain (issue 12 point 8): every sandbox of this host moves to other hosts under the
//! same id, with its memory (kernels and their variables, code-context handles) and files,
//! and the host is marked `draining` so nothing new lands on it.
//!
//! One sandbox at a time: hibernate here (checkpoint; the sandbox stops answering), wait for
//! the image's upload to the object store, pick a host with the scheduler (this one is
//! draining, so never itself), and ask it to take the sandbox over
//! ([`ADOPTION_PATH`], host to host): it fetches the image, moves the row to itself and wakes
//! the sandbox (and pauses it again if it was paused; one that was hibernated stays so).
//! While that runs this host holds the sandbox's lifecycle gate, so a request here cannot
//! wake it back; once it moved, requests here answer 503 `moved to host ...; retry` and a
//! retry is forwarded to its new host. Its volumes go with it when it is their only holder
//! (uploaded after the checkpoint closed them, fetched by the new host before it takes the
//! row: `host/volume_moves.rs`). A sandbox that cannot move (a volume it shares read-only with
//! another sandbox here; no other host has room; an upload failed) stays here, running or as
//! it was, and the report names why.

use super::place::{place, Need, Placement};
use crate::error::ApiError;
use crate::host::images::hibernate_image_id;
use crate::host::volume_moves::VolumeTransfer;
use crate::host::Live;
use crate::state::SandboxState;
use crate::AppState;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// The internal path (under `/v1`) of a take-over asked by a draining host.
pub const ADOPTION_PATH: &str = "/internal/adoptions";

/// Longest wait for a sandbox's hibernation image to reach the object store.
const UPLOAD_WAIT: Duration = Duration::from_secs(180);

/// What a drain did (`POST /v1/hosts/{name}/drain`).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct DrainReport {
    /// The drained host (now `draining`).
    pub host: String,
    /// The sandboxes that moved.
    pub moved: Vec<Moved>,
    /// The sandboxes that stayed, with why.
    pub left: Vec<Left>,
}

/// One sandbox a drain moved.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Moved {
    pub sandbox_id: String,
    /// The host it runs on now.
    pub to: String,
    /// Its state there: as before the drain (`running`, `paused` or `hibernated`), or what
    /// the new host left it in when it took it but could not wake or pause it.
    pub state: String,
    /// From the start of its checkpoint here to its answer there, ms: the time a running
    /// sandbox did not answer.
    pub ms: u64,
}

/// One sandbox a drain could not move.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Left {
    pub sandbox_id: String,
    pub reason: String,
}

/// A take-over asked of another host (body of [`ADOPTION_PATH`]).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Adoption {
    pub sandbox_id: String,
    /// The draining host.
    pub from: String,
    /// The state to leave it in: `running`, `paused` or `hibernated`.
    pub state: String,
    /// The volumes it holds, uploaded for the move (`host/volume_moves.rs`).
    #[serde(default)]
    pub volumes: Vec<VolumeTransfer>,
}

/// Drains this host (see the module doc).
///
/// # Errors
/// 409 on a single host (a drain needs a cluster with an object store); store errors. A
/// sandbox that fails to move is reported in [`DrainReport::left`], not as an error.
pub async fn drain_here(st: &AppState) -> Result<DrainReport, ApiError> {
    let me = st.cluster.cfg.host_name.clone();
    if !st.cluster.cfg.shared || st.host.objects().is_none() {
        return Err(ApiError::Conflict(
            "a drain moves sandboxes to other hosts through object storage: it needs a cluster (--store postgres://..., --object-store ...)".into(),
        ));
    }
    st.host.store.set_host_state(&me, "draining").await?;
    info!(host = %me, "draining");
    let mut report = DrainReport {
        host: me,
        moved: Vec::new(),
        left: Vec::new(),
    };
    for live in st.host.all() {
        match move_one(st, &live).await {
            Ok(Some(moved)) => report.moved.push(moved),
            Ok(None) => {}
            Err(e) => {
                warn!(sandbox_id = %live.id, error = %e, "a drain left a sandbox here");
                report.left.push(Left {
                    sandbox_id: live.id.clone(),
                    reason: e.to_string(),
                })
            }
        }
    }
    Ok(report)
}

/// Moves one sandbox; `None` for one that needs no move (deleted, failed).
async fn move_one(st: &AppState, live: &Arc<Live>) -> Result<Option<Moved>, ApiError> {
    let (state, held, template, memory_mb) = {
        let r = live.row.lock().await;
        (
            SandboxState::parse(&r.status),
            r.volumes.clone(),
            r.template.clone(),
            r.memory_mb,
        )
    };
    match state {
        SandboxState::Running | SandboxState::Paused | SandboxState::Hibernated => {}
        SandboxState::Creating => {
            return Err(ApiError::Conflict(
                "it was being created when the drain began; drain again once it runs".into(),
            ))
        }
        _ => return Ok(None),
    }
    let need = Need::like(&template, memory_mb, 1);
    let (target, claim) = match place(&st.cluster, &st.host, &need).await? {
        (Placement::There(h), claim) => (h, claim),
        (Placement::Here, _) => {
            return Err(ApiError::Busy {
                message: "no other host has room for it".into(),
                retry_after_s: crate::host::RETRY_AFTER_S,
            })
        }
    };
    // Its volumes go with it when it is their only holder (volume_moves.rs).
    st.host.begin_volume_move(&live.id, &held)?;
    let mut sent = Vec::new();
    let moved = move_with(st, live, state, &target, &held, &mut sent).await;
    let went = match &moved {
        Ok(_) => true,
        // It may have moved even though the answer was lost.
        Err(_) => st
            .host
            .store
            .sandbox(&live.id)
            .await
            .ok()
            .flatten()
            .is_some_and(|r| r.host == target.name),
    };
    st.host
        .end_volume_move(&live.id, &held, &sent, went, &target.name)
        .await;
    if went {
        claim.answered();
    }
    moved.map(Some)
}

/// [`move_one`] once the target is chosen and the volumes blocked; `sent` receives the
/// volumes uploaded (so the caller can end their move whatever happens).
async fn move_with(
    st: &AppState,
    live: &Arc<Live>,
    state: SandboxState,
    target: &pandastack_store::HostRow,
    held: &[pandastack_store::SandboxVolume],
    sent: &mut Vec<VolumeTransfer>,
) -> Result<Moved, ApiError> {
    let t = Instant::now();
    if state != SandboxState::Hibernated {
        let host = st.host.clone();
        let l = live.clone();
        crate::api::detached(async move { host.hibernate(&l, "drain").await }).await?;
    }
    wait_uploaded(st, &live.id).await?;
    // No wake here while it moves (a request waits, then finds it gone); its volumes are
    // uploaded under the gate too, so what is sent is what the image saw.
    let _gate = live.gate.write().await;
    let local_image = {
        let r = live.row.lock().await;
        if r.status != SandboxState::Hibernated.as_str() {
            return Err(ApiError::Conflict(format!(
                "a request woke it during the drain (it is {})",
                r.status
            )));
        }
        r.hibernate_image.clone().map(PathBuf::from)
    };
    if !held.is_empty() {
        *sent = st.host.send_volumes(&live.id, held).await?;
    }
    let adoption = Adoption {
        sandbox_id: live.id.clone(),
        from: st.cluster.cfg.host_name.clone(),
        state: state.as_str().to_string(),
        volumes: sent.clone(),
    };
    let resp = super::forward::post_to_host(
        &st.cluster,
        target,
        &format!("/v1{ADOPTION_PATH}"),
        Some(&adoption),
        None,
    )
    .await?;
    let status = resp.status();
    let mut state_there = adoption.state.clone();
    if !status.is_success() {
        let text = axum::body::to_bytes(resp.into_body(), 64 * 1024)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let Some(row) = st
            .host
            .store
            .sandbox(&live.id)
            .await?
            .filter(|r| r.host == target.name)
        else {
            // Still hibernated here, with its image: a request wakes it on this host.
            return Err(ApiError::BadGateway(format!(
                "host {} did not take it over ({status}): {text}",
                target.name
            )));
        };
        // It took the row but failed after (its wake found it full, or a pause failed): the
        // sandbox is there in the state the store says.
        warn!(sandbox_id = %live.id, to = %target.name, answer = %text, state = %row.status, "moved, but not into its state");
        state_there = row.status;
    }
    st.host.forget_moved(live, local_image);
    let ms = t.elapsed().as_millis() as u64;
    crate::metrics::observe("drain_move", t);
    info!(sandbox_id = %live.id, to = %target.name, ms, volumes = held.len(), "moved by a drain");
    Ok(Moved {
        sandbox_id: live.id.clone(),
        to: target.name.clone(),
        state: state_there,
        ms,
    })
}

/// Waits until sandbox `id`'s hibernation image is in the object store.
///
/// # Errors
/// 504 after [`UPLOAD_WAIT`] (the sandbox stays hibernated here).
async fn wait_uploaded(st: &AppState, id: &str) -> Result<(), ApiError> {
    let deadline = Instant::now() + UPLOAD_WAIT;
    let image = hibernate_image_id(id);
    while !st.host.uploaded(&image).await {
        if Instant::now() >= deadline {
            return Err(ApiError::Timeout(format!(
                "its image did not reach the object store within {} s; it stays hibernated here",
                UPLOAD_WAIT.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Takes over a sandbox of a draining host (the other half of [`move_one`], on the target).
///
/// # Errors
/// As [`crate::host::Host::adopt_drained`]; wake and pause errors (the sandbox is then here,
/// hibernated or failed as the wake left it).
pub async fn adopt_here(st: &AppState, a: Adoption) -> Result<Arc<Live>, ApiError> {
    let live = st
        .host
        .adopt_drained(&a.sandbox_id, &a.from, &a.volumes)
        .await?;
    match a.state.as_str() {
        "hibernated" => {}
        "paused" => {
            st.host.wake(&live, "drain").await?;
            st.host.pause(&live).await?;
        }
        _ => st.host.wake(&live, "drain").await?,
    }
    Ok(live)
}
