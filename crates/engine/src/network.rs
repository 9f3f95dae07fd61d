//! Sandbox networking as the engine sees it (issue 7): the egress policy an instance runs under
//! and what the engine reports back about an instance's network.
//!
//! Every networked sandbox sees the same addresses inside ([`GUEST_ADDR`] on `eth0`, gateway
//! [`GATEWAY_ADDR`], resolver [`DNS_ADDR`]); the engine gives each instance its own host-side
//! address ([`InstanceNetwork::guest_ip`]) and translates between the two. A restored copy, a
//! fork child or a woken sandbox therefore needs no reconfiguration inside: only the host side
//! changes.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// The sandbox's own address, the same in every sandbox (the slirp4netns convention).
pub const GUEST_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 100);
/// Prefix length of the inside network `10.0.2.0/24`.
pub const GUEST_PREFIX: u8 = 24;
/// The default gateway every sandbox sees.
pub const GATEWAY_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The DNS resolver every sandbox sees (`/etc/resolv.conf` of the templates); the engine
/// forwards it to the host's resolver.
pub const DNS_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 3);

/// The inside network every sandbox sees (`10.0.2.0/24`: its own address, the gateway, the
/// resolver). No policy opens it (issue 23 finding 2): the host's services on it are the
/// operator's to open.
pub const GUEST_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 0, 2, 0), GUEST_PREFIX);

/// Outbound traffic an instance may send. Traffic from the host to the sandbox (the port
/// proxy) is always allowed; another sandbox never reaches it.
///
/// Evaluation order, first match wins: established flows; the host services every sandbox
/// reaches (the database front end's ports, the operator's `--allow-host-service`); DNS to the
/// host's resolver when `internet` is true; then, whatever the lists say (issue 23 findings 1
/// and 2), the host itself (its addresses, broadcast and multicast), other sandboxes and
/// [`GUEST_NET`] are refused; then `allow_out`; `deny_out`; the always-blocked private ranges
/// (`0/8`, `10/8`, `100.64/10`, `127/8`, `169.254/16`, `172.16/12`, `192.168/16`, `224/3`);
/// then `internet`. So an `allow_out` entry opens exactly that destination even without
/// internet access (the E2B rule that allow wins over deny), but never the host or another
/// sandbox; the API refuses such an entry with a 400.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkPolicy {
    /// Public destinations allowed (REST `allow_internet_access`, default from the server's
    /// `--sandbox-egress`).
    pub internet: bool,
    /// Destinations always allowed.
    #[serde(default)]
    pub allow_out: Vec<EgressRule>,
    /// Destinations always refused (after `allow_out`).
    #[serde(default)]
    pub deny_out: Vec<EgressRule>,
}

impl NetworkPolicy {
    /// Internet allowed, no lists.
    pub fn open() -> Self {
        NetworkPolicy {
            internet: true,
            allow_out: Vec::new(),
            deny_out: Vec::new(),
        }
    }

    /// True when the sandbox may query DNS through the host's resolver: only with internet
    /// access. Without it the resolver's port 53 is closed too, whatever `allow_out` says, so
    /// it is no channel for other payloads (issue 23 finding 12).
    pub fn allows_dns(&self) -> bool {
        self.internet
    }
}

/// One `allow_out` / `deny_out` entry: an IPv4 network and optionally one TCP/UDP port.
/// Written `A.B.C.D`, `A.B.C.D/N`, `A.B.C.D:PORT` or `A.B.C.D/N:PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EgressRule {
    /// Network address (host bits are cleared when parsed).
    pub addr: Ipv4Addr,
    /// Prefix length, 0-32.
    pub prefix: u8,
    /// Destination port (TCP and UDP), or every port.
    pub port: Option<u16>,
}

/// Why an egress rule did not parse (the caller names the field).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not an IPv4 address or CIDR with an optional :port (e.g. 203.0.113.7, 198.51.100.0/24, 192.0.2.1:443)")]
pub struct EgressRuleError(pub String);

impl FromStr for EgressRule {
    type Err = EgressRuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || EgressRuleError(s.chars().take(80).collect());
        let (net, port) = match s.rsplit_once(':') {
            Some((n, p)) => {
                let port: u16 = p.parse().map_err(|_| bad())?;
                if port == 0 {
                    return Err(bad());
                }
                (n, Some(port))
            }
            None => (s, None),
        };
        let (addr, prefix) = match net.split_once('/') {
            Some((a, p)) => {
                let prefix: u8 = p.parse().map_err(|_| bad())?;
                (a, prefix)
            }
            None => (net, 32),
        };
        if prefix > 32 || addr.contains(char::is_whitespace) {
            return Err(bad());
        }
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        Ok(EgressRule {
            addr: Ipv4Addr::from(u32::from(addr) & mask),
            prefix,
            port,
        })
    }
}

impl EgressRule {
    /// True when this rule's network and `net` (address, prefix length 0-32) share at least
    /// one address; the port plays no part.
    pub fn overlaps(&self, net: (Ipv4Addr, u8)) -> bool {
        let p = self.prefix.min(net.1);
        let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
        u32::from(self.addr) & mask == u32::from(net.0) & mask
    }
}

impl fmt::Display for EgressRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.addr)?;
        if self.prefix != 32 {
            write!(f, "/{}", self.prefix)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

impl Serialize for EgressRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for EgressRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What the engine reports about a running instance's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceNetwork {
    /// The host-reachable address of this instance (unique on the host; a new instance of the
    /// same sandbox after wake gets a new one). Connections to it reach [`GUEST_ADDR`] inside.
    pub guest_ip: Ipv4Addr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_print() {
        for (text, shown) in [
            ("203.0.113.7", "203.0.113.7"),
            ("198.51.100.9/24", "198.51.100.0/24"),
            ("192.0.2.1:443", "192.0.2.1:443"),
            ("10.0.0.0/8:53", "10.0.0.0/8:53"),
            ("0.0.0.0/0", "0.0.0.0/0"),
        ] {
            let r: EgressRule = text.parse().unwrap();
            assert_eq!(r.to_string(), shown, "{text}");
        }
        let r: EgressRule = "192.0.2.1:443".parse().unwrap();
        assert_eq!(r.port, Some(443));
        assert_eq!(r.prefix, 32);
    }

    #[test]
    fn bad_rules_are_refused() {
        for text in [
            "",
            "example.com",
            "10.0.0.0/33",
            "10.0.0.1:0",
            "10.0.0.1:70000",
            "::1",
            "10.0.0.1/8/9",
            " 10.0.0.1",
            "10.0.0",
        ] {
            assert!(text.parse::<EgressRule>().is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn overlap_ignores_the_port_and_works_both_ways() {
        let r = |t: &str| t.parse::<EgressRule>().unwrap();
        assert!(r("10.0.2.2:5432").overlaps(GUEST_NET));
        assert!(r("10.0.0.0/8").overlaps(GUEST_NET));
        assert!(r("0.0.0.0/0").overlaps((Ipv4Addr::new(192, 0, 2, 7), 32)));
        assert!(!r("10.0.3.0/24").overlaps(GUEST_NET));
        assert!(!r("10.99.0.1").overlaps((Ipv4Addr::new(10, 201, 0, 0), 16)));
    }

    #[test]
    fn policy_round_trips_as_json() {
        let p = NetworkPolicy {
            internet: false,
            allow_out: vec!["10.99.0.1:8080".parse().unwrap()],
            deny_out: vec![],
        };
        let j = serde_json::to_string(&p).unwrap();
        assert!(j.contains("\"10.99.0.1:8080\""), "{j}");
        assert_eq!(serde_json::from_str::<NetworkPolicy>(&j).unwrap(), p);
        assert!(
            !p.allows_dns(),
            "allow_out alone opens no DNS (issue 23 finding 12)"
        );
        assert!(NetworkPolicy::open().allows_dns());
        assert!(!NetworkPolicy {
            internet: false,
            allow_out: vec![],
            deny_out: vec![]
        }
        .allows_dns());
    }
}
