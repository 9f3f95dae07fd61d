//! Who may connect to a database's port (issue 10: "reachable from the workspace's sandboxes,
//! and no one else's"), decided before PostgreSQL sees a byte.
//!
//! - The host itself (a source address on loopback, or the host service address, which only
//!   the host can send from: a packet from outside claiming it is a martian the kernel drops):
//!   admitted. The owner's app on the host uses the same URL as the sandboxes.
//! - A sandbox: its connection arrives from its instance's `guest_ip` (every sandbox's traffic
//!   leaves its network namespace translated to that address, and nothing inside can send
//!   from another). Admitted when that sandbox belongs to the database's workspace.
//! - Anything else, another workspace's sandboxes included: refused with SQLSTATE 28000.
//!
//! An admitted connection counts as activity and starts a stopped cluster (wake on connect).

use super::{Databases, LiveDb};
use async_trait::async_trait;
use pandastack_postgres::frontend::{Admission, Refusal, Session};
use std::net::{IpAddr, SocketAddr};
use std::sync::Weak;

/// The server's [`Admission`] (weak, so the front end's tasks do not keep the server alive).
pub struct Gate(pub Weak<Databases>);

#[async_trait]
impl Admission for Gate {
    async fn admit(&self, database_id: &str, peer: SocketAddr) -> Result<Session, Refusal> {
        let refused = |sqlstate, message: &str| Refusal {
            sqlstate,
            message: message.to_string(),
        };
        let dbs = self
            .0
            .upgrade()
            .ok_or_else(|| refused("57P01", "the server is shutting down"))?;
        let db = dbs
            .get_any(database_id)
            .ok_or_else(|| refused("3D000", "this database no longer exists"))?;
        if !dbs.peer_may_connect(&db, peer.ip()).await {
            return Err(refused(
                "28000",
                "connection refused: only the host and sandboxes of this database's workspace may connect",
            ));
        }
        // Taken before the cluster is reached: a reset-credentials from now on ends it.
        let end = db.session_token();
        let guard = db.connection();
        dbs.ensure_running(&db, "connection")
            .await
            .map_err(|e| refused("57P03", &e.to_string()))?;
        Ok(Session {
            socket_dir: db.dirs.socket_dir.clone(),
            guard: Box::new(guard),
            end,
        })
    }
}

impl Databases {
    /// True when `peer` is the host itself or a sandbox of `db`'s workspace (module docs).
    pub async fn peer_may_connect(&self, db: &LiveDb, peer: IpAddr) -> bool {
        let peer = match peer {
            IpAddr::V4(a) => a,
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => v4,
                None => return a.is_loopback(),
            },
        };
        if peer.is_loopback() || peer == self.url_host {
            return true;
        }
        let peer = peer.to_string();
        for sandbox in self.host.all() {
            let guest_ip = sandbox.row.lock().await.guest_ip.clone();
            if guest_ip.as_deref() == Some(peer.as_str()) {
                return sandbox.workspace_id == db.workspace_id;
            }
        }
        false
    }
}
