//! The host agent's side of sandbox networking (issue 7). The engine owns namespaces, links and
//! firewall rules; here the sandbox's policy is kept in its row (so every new instance of it
//! gets the same one), listening ports are read from inside, and the proxy finds where to
//! connect.

use super::{Host, Live};
use crate::error::{from_guest, ApiError};
use pandastack_engine::NetworkPolicy;
use pandastack_guest_protocol::{GuestMsg, HostMsg};
use pandastack_store::SandboxRow;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

/// The egress policy stored in a sandbox row, or `None` when the sandbox has no network.
pub fn policy_of(row: &SandboxRow) -> Option<NetworkPolicy> {
    row.network
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

/// One TCP socket listening inside a sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    pub port: u16,
    /// The local address it is bound to (`0.0.0.0` for every address; IPv6 wildcards are
    /// reported as `0.0.0.0` too).
    pub addr: Ipv4Addr,
}

impl Listener {
    /// True when connections from outside the sandbox can reach it (not bound to loopback).
    pub fn reachable(&self) -> bool {
        !self.addr.is_loopback()
    }
}

impl Host {
    /// TCP sockets listening in a running sandbox, by port (each port once, a reachable bind
    /// preferred), from `/proc/net/tcp` and `/proc/net/tcp6` read through the guest.
    ///
    /// # Errors
    /// As [`Host::ready`]; 500 when the guest cannot read its `/proc`.
    pub async fn listeners(&self, live: &Arc<Live>) -> Result<Vec<Listener>, ApiError> {
        let ready = self.ready(live).await?;
        let mut out: Vec<Listener> = Vec::new();
        for (path, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
            let rid = ready.conn.new_id();
            let mut rx = ready
                .conn
                .request(
                    HostMsg::FileRead {
                        id: rid,
                        path: path.into(),
                        // A few KiB: no read window (pacing) needed.
                        window: None,
                    },
                    Vec::new(),
                )
                .await?;
            let mut text = Vec::new();
            while let Some((msg, body)) = rx.recv().await {
                match msg {
                    GuestMsg::FileChunk { .. } => text.extend_from_slice(&body),
                    GuestMsg::FileEnd { .. } => break,
                    // A kernel without IPv6 sockets has no tcp6 table.
                    GuestMsg::Error { .. } if v6 => break,
                    GuestMsg::Error { code, message, .. } => return Err(from_guest(code, message)),
                    other => {
                        return Err(ApiError::internal(
                            "listing ports",
                            format!("unexpected guest reply {other:?}"),
                        ))
                    }
                }
            }
            for l in parse_proc_net_tcp(&String::from_utf8_lossy(&text), v6) {
                match out.iter_mut().find(|o| o.port == l.port) {
                    Some(o) if !o.reachable() && l.reachable() => *o = l,
                    Some(_) => {}
                    None => out.push(l),
                }
            }
        }
        out.sort_by_key(|l| l.port);
        Ok(out)
    }

    /// Where the port proxy connects for `port` of a sandbox: its current instance's
    /// `guest_ip`. Wakes a hibernated sandbox (any request does, seed 003) and counts as
    /// activity.
    ///
    /// # Errors
    /// 409 when the sandbox has no network or is not running; wake errors.
    pub async fn proxy_target(&self, live: &Arc<Live>, port: u16) -> Result<SocketAddr, ApiError> {
        // `ready` wakes and checks the state; the gate is not held for the proxied exchange, so
        // a long-lived stream never holds up kill, snapshot or hibernate.
        drop(self.ready(live).await?);
        let ip = live.row.lock().await.guest_ip.clone();
        let ip: Ipv4Addr = ip.as_deref().and_then(|s| s.parse().ok()).ok_or_else(|| {
            ApiError::Conflict(format!(
                "sandbox {} has no network (this server runs with --sandbox-network none)",
                live.id
            ))
        })?;
        Ok(SocketAddr::from((ip, port)))
    }
}

/// Listening sockets (state `0A`) of a `/proc/net/tcp` or `/proc/net/tcp6` table.
fn parse_proc_net_tcp(text: &str, v6: bool) -> Vec<Listener> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let local = f.nth(1)?;
            let state = f.nth(1)?;
            if state != "0A" {
                return None;
            }
            let (addr, port) = local.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let addr = if v6 {
                // Only the wildcard and loopback matter here; both map to their IPv4 twin.
                match addr {
                    "00000000000000000000000000000000" => Ipv4Addr::UNSPECIFIED,
                    "00000000000000000000000001000000" => Ipv4Addr::LOCALHOST,
                    other if other.len() == 32 && other.starts_with("0000000000000000FFFF0000") => {
                        let w = u32::from_str_radix(&other[24..], 16).ok()?;
                        Ipv4Addr::from(w.to_ne_bytes())
                    }
                    _ => Ipv4Addr::UNSPECIFIED,
                }
            } else {
                let w = u32::from_str_radix(addr, 16).ok()?;
                Ipv4Addr::from(w.to_ne_bytes())
            };
            Some(Listener { port, addr })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_sockets_are_found_in_proc_net_tcp() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   5: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 6 2 0000000000000000 0 0 0 0 -1
   6: 0100007F:0CEA 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7 2 0000000000000000 0 0 0 0 -1
   7: 6402000A:1F40 0502000A:D431 01 00000000:00000000 00:00000000 00000000     0        0 8 2 0000000000000000 0 0 0 0 -1
";
        let got = parse_proc_net_tcp(v4, false);
        if cfg!(target_endian = "little") {
            assert_eq!(
                got,
                vec![
                    Listener {
                        port: 8000,
                        addr: Ipv4Addr::UNSPECIFIED
                    },
                    Listener {
                        port: 3306,
                        addr: Ipv4Addr::LOCALHOST
                    },
                ]
            );
            assert!(!got[1].reachable());
        }
        let v6 =
            "  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:0BB8 00000000000000000000000000000000:0000 0A 0
   1: 00000000000000000000000001000000:1388 00000000000000000000000000000000:0000 0A 0
";
        let got6 = parse_proc_net_tcp(v6, true);
        assert_eq!(got6.len(), 2);
        assert_eq!(got6[0].port, 3000);
        assert!(got6[0].reachable());
        assert!(!got6[1].reachable());
    }
}
