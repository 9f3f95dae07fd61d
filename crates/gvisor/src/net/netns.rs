//! Making and removing one slot's network namespace.
//!
//! ```text
//!  sandbox (gVisor netstack)          namespace ps-<tag>-<n>                 host
//!  eth0 10.0.2.100/24  ==veth==  gw0 (no address)   up0 (no address)  ==veth==  ps<tag>-<n>
//!  gw 10.0.2.2, dns 10.0.2.3        kernel routes + NAT between them          10.x.y.(4n+1)/30
//! ```
//!
//! gVisor's netstack takes over every interface of the namespace that is up and has an
//! address, and steals those addresses (runsc `createInterfacesAndRoutesFromNS`). So only
//! `eth0` has one; `gw0` and `up0` stay address-less and the namespace's kernel routes between
//! them with policy routing (tables [`TABLE_OUT`] / [`TABLE_IN`]; the main table holds only
//! `eth0`'s routes, which runsc copies into the sandbox) and permanent neighbour entries (no
//! ARP needs an address). IPv6 is off in the namespace, so no link-local address makes gVisor
//! take `gw0` or `up0` too. The namespace's own nft table translates `10.0.2.100` to and from
//! the slot's `guest_ip` and forwards DNS to the host's resolver ([`super::firewall`]).

use super::cmd;
use super::firewall::namespace_rules;
use super::slot::{
    Layout, Slot, GATEWAY_LINK, GATEWAY_MAC, GUEST_LINK, GUEST_MAC, HOST_MAC, TABLE_IN, TABLE_OUT,
    UPLINK, UPLINK_MAC,
};
use pandastack_engine::{DNS_ADDR, GATEWAY_ADDR, GUEST_ADDR, GUEST_PREFIX};
use std::net::Ipv4Addr;

/// Sysctls of the namespace, set before any link exists (new links inherit `default`).
const SYSCTLS: &str = "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6
echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter
echo 0 > /proc/sys/net/ipv4/conf/default/rp_filter
exec nft -f -";

/// Creates slot `s`'s namespace, links, routes and namespace rules. On error everything made
/// so far is removed again.
///
/// # Errors
/// The failing tool's complaint.
pub async fn create(layout: &Layout, s: Slot, resolver: Option<Ipv4Addr>) -> Result<(), String> {
    let ns = layout.netns(s);
    if let Err(e) = cmd::run("ip", &["netns", "add", &ns], None).await {
        if !e.contains("File exists") {
            return Err(e);
        }
        // A leftover of a crash with this slot's name: replace it.
        remove(layout, s).await;
        cmd::run("ip", &["netns", "add", &ns], None).await?;
    }
    let made = async {
        cmd::in_netns(&ns, SYSCTLS, Some(&namespace_rules(layout, s, resolver))).await?;
        cmd::ip_batch(None, &host_batch(layout, s)).await?;
        cmd::ip_batch(Some(&ns), &namespace_batch(layout, s)).await
    }
    .await;
    if made.is_err() {
        remove(layout, s).await;
    }
    made
}

/// Removes slot `s`'s host link (which takes its peer along) and namespace. Missing pieces
/// are fine. A namespace still held by a dying sandbox process goes when that process does.
pub async fn remove(layout: &Layout, s: Slot) {
    let batch = format!(
        "link del {}\nnetns del {}\n",
        layout.host_link(s),
        layout.netns(s)
    );
    let _ = cmd::run("ip", &["-force", "-batch", "-"], Some(&batch)).await;
}

fn host_batch(layout: &Layout, s: Slot) -> String {
    let link = layout.host_link(s);
    format!(
        "link add {link} address {HOST_MAC} type veth peer name {UPLINK} address {UPLINK_MAC} netns {ns}
addr add {host}/30 dev {link}
link set {link} up
neigh replace {guest_ip} lladdr {UPLINK_MAC} dev {link} nud permanent
",
        ns = layout.netns(s),
        host = layout.host_addr(s),
        guest_ip = layout.guest_ip(s),
    )
}

fn namespace_batch(layout: &Layout, s: Slot) -> String {
    let host = layout.host_addr(s);
    format!(
        "link set lo up
link add {GUEST_LINK} address {GUEST_MAC} type veth peer name {GATEWAY_LINK} address {GATEWAY_MAC}
addr add {GUEST_ADDR}/{GUEST_PREFIX} dev {GUEST_LINK}
link set {GUEST_LINK} up
link set {GATEWAY_LINK} up
link set {UPLINK} up
route add default via {GATEWAY_ADDR} dev {GUEST_LINK}
neigh add {GATEWAY_ADDR} lladdr {GATEWAY_MAC} dev {GUEST_LINK} nud permanent
neigh add {DNS_ADDR} lladdr {GATEWAY_MAC} dev {GUEST_LINK} nud permanent
route add {GUEST_ADDR}/32 dev {GATEWAY_LINK} table {TABLE_IN}
neigh add {GUEST_ADDR} lladdr {GUEST_MAC} dev {GATEWAY_LINK} nud permanent
route add default via {host} dev {UPLINK} onlink table {TABLE_OUT}
neigh add {host} lladdr {HOST_MAC} dev {UPLINK} nud permanent
rule add iif {GATEWAY_LINK} lookup {TABLE_OUT} pref {TABLE_OUT}
rule add iif {UPLINK} lookup {TABLE_IN} pref {TABLE_IN}
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_name_the_slot_and_keep_gw0_and_up0_address_less() {
        let l = Layout {
            tag: "abcdef".into(),
            base: Ipv4Addr::new(10, 201, 0, 0),
            prefix: 16,
        };
        let h = host_batch(&l, Slot(2));
        assert!(h.contains("link add psabcdef-2 "), "{h}");
        assert!(h.contains("netns ps-abcdef-2"), "{h}");
        assert!(h.contains("addr add 10.201.0.9/30 dev psabcdef-2"), "{h}");
        let n = namespace_batch(&l, Slot(2));
        assert_eq!(
            n.matches("addr add").count(),
            1,
            "only eth0 gets an address: {n}"
        );
        assert!(n.contains("route add default via 10.201.0.9 dev up0 onlink table 100"));
    }
}
