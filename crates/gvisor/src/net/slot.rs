//! A network *slot*: one numbered place in the host's sandbox network, holding one network
//! namespace, its links and its host-side addresses. Slot `n` of network `B/P` owns the four
//! addresses `B + 4n .. B + 4n + 3`: `B + 4n + 1` on the host's end of the uplink, `B + 4n + 2`
//! the instance's `guest_ip` (translated to `GUEST_ADDR` inside).

use std::net::Ipv4Addr;

/// Name of the uplink inside the namespace (its peer is the host-side link).
pub const UPLINK: &str = "up0";
/// Name of the gateway end of the sandbox's link inside the namespace (peer of `eth0`).
pub const GATEWAY_LINK: &str = "gw0";
/// The sandbox's interface (taken over by gVisor's netstack).
pub const GUEST_LINK: &str = "eth0";

/// MAC of `eth0` (the sandbox), the same in every namespace.
pub const GUEST_MAC: &str = "02:50:0a:00:02:64";
/// MAC of `gw0` (the gateway the sandbox talks to), the same in every namespace.
pub const GATEWAY_MAC: &str = "02:50:0a:00:02:02";
/// MAC of `up0` (the namespace end of the uplink).
pub const UPLINK_MAC: &str = "02:50:00:00:00:02";
/// MAC of the host end of the uplink.
pub const HOST_MAC: &str = "02:50:00:00:00:01";

/// Routing table in the namespace for traffic from the sandbox (default route up the uplink).
pub const TABLE_OUT: u32 = 100;
/// Routing table in the namespace for traffic to the sandbox.
pub const TABLE_IN: u32 = 101;

/// The host's sandbox network: a CIDR and the tag that names everything of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// 6 hex digits derived from the data dir: every namespace, link and nft table of this
    /// server carries it, so two servers on one host never touch each other's.
    pub tag: String,
    /// Network address of the CIDR (host bits clear).
    pub base: Ipv4Addr,
    /// Prefix length, at most 28.
    pub prefix: u8,
}

/// One slot number (>= 1; slot 0 is never used, so the CIDR's network address stays unused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(pub u32);

impl Layout {
    /// Number of usable slots (`2^(32 - prefix) / 4 - 1`).
    pub fn capacity(&self) -> u32 {
        let size = 1u64 << (32 - u32::from(self.prefix));
        ((size / 4).saturating_sub(1)).min(u64::from(u32::MAX)) as u32
    }

    /// The host end of slot `s`'s uplink.
    pub fn host_addr(&self, s: Slot) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) + 4 * s.0 + 1)
    }

    /// The host-reachable address of the instance in slot `s`.
    pub fn guest_ip(&self, s: Slot) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) + 4 * s.0 + 2)
    }

    /// The slot whose `guest_ip` is `ip`, if `ip` is one.
    pub fn slot_of_guest_ip(&self, ip: Ipv4Addr) -> Option<Slot> {
        let off = u32::from(ip).checked_sub(u32::from(self.base))?;
        (off % 4 == 2 && off / 4 >= 1 && off / 4 <= self.capacity()).then_some(Slot(off / 4))
    }

    /// Network namespace name (under `/run/netns`).
    pub fn netns(&self, s: Slot) -> String {
        format!("ps-{}-{}", self.tag, s.0)
    }

    /// Prefix of every namespace name of this server.
    pub fn netns_prefix(&self) -> String {
        format!("ps-{}-", self.tag)
    }

    /// Host-side link name (at most 15 bytes: `ps` + 6 + `-` + up to 6 digits).
    pub fn host_link(&self, s: Slot) -> String {
        format!("ps{}-{}", self.tag, s.0)
    }

    /// Prefix of every host-side link name of this server (an nft wildcard with `*`).
    pub fn host_link_prefix(&self) -> String {
        format!("ps{}-", self.tag)
    }

    /// The nft table of this server (family `inet`).
    pub fn table(&self) -> String {
        format!("pandastack_{}", self.tag)
    }

    /// `B/P` as text.
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.base, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            tag: "a1b2c3".into(),
            base: Ipv4Addr::new(10, 201, 0, 0),
            prefix: 16,
        }
    }

    #[test]
    fn slots_map_to_distinct_addresses_and_short_names() {
        let l = layout();
        assert_eq!(l.capacity(), 16383);
        assert_eq!(l.host_addr(Slot(1)), Ipv4Addr::new(10, 201, 0, 5));
        assert_eq!(l.guest_ip(Slot(1)), Ipv4Addr::new(10, 201, 0, 6));
        assert_eq!(l.guest_ip(Slot(16383)), Ipv4Addr::new(10, 201, 255, 254));
        assert_eq!(
            l.slot_of_guest_ip(Ipv4Addr::new(10, 201, 0, 6)),
            Some(Slot(1))
        );
        assert_eq!(l.slot_of_guest_ip(Ipv4Addr::new(10, 201, 0, 5)), None);
        assert_eq!(l.slot_of_guest_ip(Ipv4Addr::new(10, 201, 0, 2)), None);
        assert!(l.host_link(Slot(l.capacity())).len() <= 15);
        assert_eq!(l.netns(Slot(7)), "ps-a1b2c3-7");
        assert_eq!(l.table(), "pandastack_a1b2c3");
    }
}
