//! Sandbox networking of the gVisor engine (issue 7).
//!
//! # Mechanism
//! Every networked instance runs in its own network namespace (a *slot*, [`slot`]) with
//! gVisor's netstack (`--network=sandbox`). Inside, every sandbox sees the same address
//! (`10.0.2.100/24`, gateway `10.0.2.2`, DNS `10.0.2.3`); the namespace translates it to the
//! slot's unique `guest_ip` on an uplink into the host ([`netns`]). A restored copy, a fork
//! child or a woken sandbox therefore gets a fresh slot and needs no change inside: gVisor
//! adopts the new namespace's (identical) interface on restore.
//!
//! On the host, one nft table per server holds every slot's egress policy and masquerades
//! sandbox traffic leaving the host ([`firewall`]). Namespaces are made ahead of time (a small
//! *stock*, refilled in the background), so a restore or fork does not wait for one.
//!
//! Everything a server makes carries its tag (from its data dir): namespaces `ps-<tag>-<n>`,
//! host links `ps<tag>-<n>`, the table `inet pandastack_<tag>`. Start-up recovery
//! ([`Networks::recover`]) rebuilds the table for the instances that live on and removes every
//! other namespace and link with the tag.

mod cidr;
mod cmd;
mod firewall;
mod netns;
mod slot;

pub use cidr::{parse as parse_cidr, resolvers as host_resolvers};
pub use slot::{Layout, Slot};

use pandastack_engine::{InstanceNetwork, NetworkPolicy};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tracing::{debug, info, warn};

/// Settings of sandbox networking on this host. `Default` leaves `data_dir` and `tag` empty
/// (set both) and asks for no range, no stock and no host services.
#[derive(Debug, Clone, Default)]
pub struct NetConfig {
    /// The server's data dir (names the server in the range claims).
    pub data_dir: PathBuf,
    /// 6 hex digits naming everything of this server (see the module docs).
    pub tag: String,
    /// `--sandbox-cidr`, if the operator chose the range.
    pub cidr: Option<(Ipv4Addr, u8)>,
    /// Namespaces kept ready ahead of time.
    pub stock: usize,
    /// `--allow-host-service`: host services (address and port, TCP and UDP) every sandbox of
    /// the server may reach whatever its policy. Only the operator opens the host (issue 23
    /// finding 2); none may lie in the sandbox network.
    pub host_services: Vec<SocketAddrV4>,
    /// `--sandbox-resolver`: the resolver sandboxes' DNS goes to; `None`: the first usable
    /// nameserver of the host's `/etc/resolv.conf`.
    pub resolver: Option<Ipv4Addr>,
}

/// What an instance directory records of its network (`net.json`), so a restarted server
/// knows each instance's slot and policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InstanceNet {
    pub slot: u32,
    pub guest_ip: Ipv4Addr,
    pub policy: NetworkPolicy,
}

impl InstanceNet {
    const FILE: &'static str = "net.json";

    /// Reads `<dir>/net.json`, if the instance has a network.
    pub fn read(dir: &Path) -> Option<InstanceNet> {
        let text = std::fs::read_to_string(dir.join(Self::FILE)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Writes `<dir>/net.json`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string(self).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(Self::FILE), text)
    }

    /// What the engine reports.
    pub fn report(&self) -> InstanceNetwork {
        InstanceNetwork {
            guest_ip: self.guest_ip,
        }
    }
}

#[derive(Default)]
struct State {
    /// Slots in use (by instances or the stock).
    used: BTreeSet<u32>,
    /// Where the next search for a free slot starts (round robin, so a released slot is not
    /// reused at once while stale connection-tracking entries of it may linger).
    next: u32,
    /// Namespaces made ahead of time, without a policy yet.
    stock: Vec<Slot>,
    /// Policies of slots that have one (their chain exists in the host table).
    policies: HashMap<Slot, NetworkPolicy>,
    /// The host table has been loaded by this process.
    table_ready: bool,
    /// TCP ports of host services open to every sandbox ([`Networks::set_host_ports`]).
    host_ports: BTreeSet<u16>,
    /// [`pandastack_engine::GATEWAY_ADDR`] is on the host's loopback.
    host_addr_ready: bool,
}

/// Slots, the stock and the host table of one server. Shared as `Arc<Networks>`.
pub struct Networks {
    layout: Layout,
    resolvers: Vec<Ipv4Addr>,
    /// [`NetConfig::host_services`].
    host_services: Vec<SocketAddrV4>,
    stock_target: usize,
    state: Mutex<State>,
    /// Serializes host-table transactions (nft changes are atomic, but the bookkeeping of
    /// which chains exist must follow the same order).
    table_lock: tokio::sync::Mutex<()>,
    refilling: AtomicBool,
    /// Set at shutdown: the stock is not refilled any more.
    stock_closed: AtomicBool,
}

impl Networks {
    /// Claims this server's address range and turns on IPv4 forwarding. The host table is
    /// loaded by [`Networks::recover`] (or the first slot taken).
    ///
    /// # Errors
    /// A message when the range is taken or overlaps a host route, a host service lies in it,
    /// or forwarding cannot be enabled.
    pub fn start(cfg: NetConfig) -> Result<Arc<Self>, String> {
        let own_links = format!("ps{}-", cfg.tag);
        let (base, prefix) = cidr::choose(&cfg.data_dir, &own_links, cfg.cidr)?;
        let sandbox_net = pandastack_engine::EgressRule {
            addr: base,
            prefix,
            port: None,
        };
        if let Some(a) = cfg
            .host_services
            .iter()
            .find(|a| sandbox_net.overlaps((*a.ip(), 32)))
        {
            return Err(format!(
                "--allow-host-service {a} is in the sandbox network {base}/{prefix}: sandboxes never reach each other"
            ));
        }
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
            .map_err(|e| format!("enabling IPv4 forwarding: {e}"))?;
        let resolvers = cfg.resolver.map_or_else(cidr::resolvers, |r| vec![r]);
        if resolvers.is_empty() {
            warn!("no nameserver in /etc/resolv.conf that sandboxes can reach; DNS inside sandboxes will fail");
        }
        let layout = Layout {
            tag: cfg.tag,
            base,
            prefix,
        };
        info!(cidr = %layout.cidr(), tag = %layout.tag, host_services = ?cfg.host_services, "sandbox network");
        Ok(Arc::new(Networks {
            layout,
            resolvers,
            host_services: cfg.host_services,
            stock_target: cfg.stock,
            state: Mutex::new(State {
                next: 1,
                ..State::default()
            }),
            table_lock: tokio::sync::Mutex::new(()),
            refilling: AtomicBool::new(false),
            stock_closed: AtomicBool::new(false),
        }))
    }

    /// The addressing of this server's sandbox network.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Rebuilds the host table with the policies of the slots in `keep` (instances that live
    /// on after a restart) and removes every other namespace and host link of this server.
    ///
    /// # Errors
    /// nft's complaint when the table cannot be loaded.
    pub async fn recover(self: &Arc<Self>, keep: &[(Slot, NetworkPolicy)]) -> Result<(), String> {
        {
            let _t = self.table_lock.lock().await;
            let ports: Vec<u16> = self.state().host_ports.iter().copied().collect();
            cmd::nft(&firewall::host_table(
                &self.layout,
                &self.resolvers,
                keep,
                &ports,
                &self.host_services,
            ))
            .await?;
            let mut st = self.state();
            st.table_ready = true;
            st.used = keep.iter().map(|(s, _)| s.0).collect();
            st.policies = keep.iter().cloned().collect();
            st.stock.clear();
            st.next = keep.iter().map(|(s, _)| s.0 + 1).max().unwrap_or(1);
        }
        let kept: BTreeSet<u32> = keep.iter().map(|(s, _)| s.0).collect();
        for s in self.leftover_slots().difference(&kept) {
            debug!(slot = s, "removing a leftover network namespace");
            netns::remove(&self.layout, Slot(*s)).await;
        }
        self.refill();
        Ok(())
    }

    /// Slots that have a namespace or a host link on this host right now.
    fn leftover_slots(&self) -> BTreeSet<u32> {
        let mut out = BTreeSet::new();
        let ns_prefix = self.layout.netns_prefix();
        let link_prefix = self.layout.host_link_prefix();
        for (dir, prefix) in [("/run/netns", &ns_prefix), ("/sys/class/net", &link_prefix)] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(n) = name
                    .strip_prefix(prefix.as_str())
                    .and_then(|n| n.parse().ok())
                {
                    out.insert(n);
                }
            }
        }
        out
    }

    async fn ensure_table(self: &Arc<Self>) -> Result<(), String> {
        if !self.state().table_ready {
            self.recover(&[]).await?;
        }
        Ok(())
    }

    fn allocate(&self) -> Result<Slot, String> {
        let mut st = self.state();
        let cap = self.layout.capacity();
        for i in 0..cap {
            let n = (st.next.saturating_sub(1) + i) % cap + 1;
            if !st.used.contains(&n) {
                st.used.insert(n);
                st.next = n % cap + 1;
                return Ok(Slot(n));
            }
        }
        Err(format!(
            "the sandbox network {} is full ({cap} slots)",
            self.layout.cidr()
        ))
    }

    fn free(&self, s: Slot) {
        let mut st = self.state();
        st.used.remove(&s.0);
        st.policies.remove(&s);
    }

    async fn make(&self) -> Result<Slot, String> {
        let s = self.allocate()?;
        let started = Instant::now();
        match netns::create(&self.layout, s, self.resolvers.first().copied()).await {
            Ok(()) => {
                debug!(
                    slot = s.0,
                    ms = started.elapsed().as_millis() as u64,
                    "network namespace ready"
                );
                Ok(s)
            }
            Err(e) => {
                self.free(s);
                Err(e)
            }
        }
    }

    /// A slot for a new instance, under `policy`: from the stock when one is ready, else made
    /// now (~30-60 ms here). The stock is refilled in the background.
    ///
    /// # Errors
    /// The failing tool's complaint; nothing is left behind.
    pub async fn take(self: &Arc<Self>, policy: &NetworkPolicy) -> Result<Slot, String> {
        self.ensure_table().await?;
        let stocked = self.state().stock.pop();
        let s = match stocked {
            Some(s) => s,
            None => self.make().await?,
        };
        self.refill();
        if let Err(e) = self.apply_policy(s, policy).await {
            netns::remove(&self.layout, s).await;
            self.free(s);
            return Err(e);
        }
        Ok(s)
    }

    async fn apply_policy(&self, s: Slot, policy: &NetworkPolicy) -> Result<(), String> {
        let _t = self.table_lock.lock().await;
        let fresh = !self.state().policies.contains_key(&s);
        cmd::nft(&firewall::slot_policy(&self.layout, s, policy, fresh)).await?;
        self.state().policies.insert(s, policy.clone());
        Ok(())
    }

    /// Replaces slot `s`'s policy.
    ///
    /// # Errors
    /// nft's complaint; the previous policy then stays in force.
    pub async fn set_policy(&self, s: Slot, policy: &NetworkPolicy) -> Result<(), String> {
        if !self.state().used.contains(&s.0) {
            return Err(format!("network slot {} is not in use", s.0));
        }
        self.apply_policy(s, policy).await
    }

    /// Removes slot `s` (policy, links, namespace) and frees it.
    pub async fn release(&self, s: Slot) {
        {
            let _t = self.table_lock.lock().await;
            if self.state().policies.contains_key(&s) {
                if let Err(e) = cmd::nft(&firewall::remove_slot_policy(&self.layout, s)).await {
                    warn!(slot = s.0, error = %e, "removing a slot's egress policy");
                }
            }
        }
        netns::remove(&self.layout, s).await;
        self.free(s);
    }

    /// Tops the stock up to its target in the background (one namespace at a time).
    pub fn refill(self: &Arc<Self>) {
        if self.stock_target == 0
            || self.stock_closed.load(Ordering::SeqCst)
            || self.refilling.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let nets = self.clone();
        tokio::spawn(async move {
            while nets.state().stock.len() < nets.stock_target
                && !nets.stock_closed.load(Ordering::SeqCst)
            {
                match nets.make().await {
                    Ok(s) => nets.state().stock.push(s),
                    Err(e) => {
                        warn!(error = %e, "making a network namespace for the stock");
                        break;
                    }
                }
            }
            nets.refilling.store(false, Ordering::SeqCst);
        });
    }

    /// Removes the stock's namespaces (at shutdown). A refill in progress stops first.
    pub async fn drain_stock(&self) {
        self.stock_closed.store(true, Ordering::SeqCst);
        while self.refilling.load(Ordering::SeqCst) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let stock = std::mem::take(&mut self.state().stock);
        for s in stock {
            self.release(s).await;
        }
    }

    /// Puts [`pandastack_engine::GATEWAY_ADDR`] on the host's loopback (once per process), so
    /// host services can listen on the address every sandbox knows as its gateway. Packets a
    /// sandbox sends there are routed up its uplink and delivered locally; the host table opens
    /// only the ports of [`Networks::set_host_ports`]. The address is shared by every server on
    /// the host and stays when one stops (another may serve on it); nothing else on the host
    /// uses `10.0.2.0/24`.
    ///
    /// # Errors
    /// ip's complaint.
    pub async fn ensure_host_addr(&self) -> Result<Ipv4Addr, String> {
        let addr = pandastack_engine::GATEWAY_ADDR;
        if !self.state().host_addr_ready {
            cmd::run(
                "ip",
                &["addr", "replace", &format!("{addr}/32"), "dev", "lo"],
                None,
            )
            .await?;
            self.state().host_addr_ready = true;
        }
        Ok(addr)
    }

    /// Replaces the TCP ports of host services every sandbox may reach (on
    /// [`pandastack_engine::GATEWAY_ADDR`]), in one nft transaction.
    ///
    /// # Errors
    /// nft's complaint; the previous set then stays in force.
    pub async fn set_host_ports(self: &Arc<Self>, ports: &[u16]) -> Result<(), String> {
        self.ensure_table().await?;
        let _t = self.table_lock.lock().await;
        cmd::nft(&firewall::host_ports(&self.layout, ports)).await?;
        self.state().host_ports = ports.iter().copied().collect();
        Ok(())
    }

    /// Removes this server's host table (at shutdown, when no instance needs it any more).
    pub async fn remove_table(&self) {
        let _t = self.table_lock.lock().await;
        let t = self.layout.table();
        if let Err(e) = cmd::nft(&format!("table inet {t} {{}}\ndelete table inet {t}\n")).await {
            warn!(error = %e, "removing the sandbox firewall table");
        }
        self.state().table_ready = false;
    }
}
