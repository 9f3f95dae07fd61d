//! Which address range a server's sandboxes use on this host, and the host's DNS resolvers.
//!
//! Several servers may run on one host (tests, a cluster on one machine). Each needs its own
//! range: a server claims one under `/run/pandastack/net/` (a file per range naming the data
//! dir; `/run` is a tmpfs, so claims end with a reboot, as do the sandboxes that needed them),
//! under an exclusive lock, after checking that no route of the host (other than its own
//! links) overlaps it. A restarted server finds its claim again and keeps its range, so the
//! sandboxes that outlived it keep their addresses. Without an explicit range the first free
//! one of `10.200.0.0/16` .. `10.254.0.0/16` is taken.

use std::fs;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Where claims live.
pub const CLAIMS_DIR: &str = "/run/pandastack/net";

/// Parses `A.B.C.D/N` (N between 8 and 28) into its network address and prefix.
///
/// # Errors
/// A message naming the text when it is not such a CIDR.
pub fn parse(text: &str) -> Result<(Ipv4Addr, u8), String> {
    let bad = || format!("'{text}' is not an IPv4 CIDR with a prefix between /8 and /28");
    let (a, p) = text.split_once('/').ok_or_else(bad)?;
    let addr: Ipv4Addr = a.parse().map_err(|_| bad())?;
    let prefix: u8 = p.parse().map_err(|_| bad())?;
    if !(8..=28).contains(&prefix) {
        return Err(bad());
    }
    let mask = u32::MAX << (32 - prefix);
    Ok((Ipv4Addr::from(u32::from(addr) & mask), prefix))
}

fn overlaps(a: (Ipv4Addr, u8), b: (Ipv4Addr, u8)) -> bool {
    let p = a.1.min(b.1);
    let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
    u32::from(a.0) & mask == u32::from(b.0) & mask
}

/// IPv4 routes of the host's main table as `(network, prefix, interface)`.
fn host_routes() -> Vec<(Ipv4Addr, u8, String)> {
    parse_routes(&fs::read_to_string("/proc/net/route").unwrap_or_default())
}

/// Parses `/proc/net/route`; the default route is left out.
fn parse_routes(text: &str) -> Vec<(Ipv4Addr, u8, String)> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let dst = u32::from_str_radix(f.get(1)?, 16).ok()?;
            let mask = u32::from_str_radix(f.get(7)?, 16).ok()?;
            // /proc/net/route prints the network-order words as native integers.
            let dst = Ipv4Addr::from(dst.to_ne_bytes());
            let prefix = mask.count_ones() as u8;
            Some((dst, prefix, f[0].to_string()))
        })
        .filter(|(_, prefix, _)| *prefix > 0)
        .collect()
}

fn claim_path(net: (Ipv4Addr, u8)) -> PathBuf {
    Path::new(CLAIMS_DIR).join(format!("{}_{}", net.0, net.1))
}

/// The range for the server of `data_dir`, whose own links start with `own_links`.
/// `requested` is the operator's `--sandbox-cidr`, if any.
///
/// # Errors
/// A message when the requested range is taken by another server or overlaps a route of the
/// host, or when no default range is free.
pub fn choose(
    data_dir: &Path,
    own_links: &str,
    requested: Option<(Ipv4Addr, u8)>,
) -> Result<(Ipv4Addr, u8), String> {
    fs::create_dir_all(CLAIMS_DIR).map_err(|e| format!("{CLAIMS_DIR}: {e}"))?;
    let lock = fs::File::create(Path::new(CLAIMS_DIR).join(".lock"))
        .map_err(|e| format!("{CLAIMS_DIR}/.lock: {e}"))?;
    // SAFETY: flock on a file descriptor this function owns for its whole duration.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!(
            "locking {CLAIMS_DIR}: {}",
            std::io::Error::last_os_error()
        ));
    }
    let me = data_dir.display().to_string();
    let claims = read_claims();
    let routes = host_routes();
    let foreign_route = |net: (Ipv4Addr, u8)| {
        routes
            .iter()
            .find(|(d, p, dev)| !dev.starts_with(own_links) && overlaps(net, (*d, *p)))
            .map(|(d, p, dev)| format!("{d}/{p} dev {dev}"))
    };
    // A claim by another data dir that still exists blocks the range.
    let foreign_claim = |net: (Ipv4Addr, u8)| {
        claims
            .iter()
            .find(|(c, owner)| owner != &me && Path::new(owner).exists() && overlaps(net, *c))
            .map(|(_, owner)| owner.clone())
    };
    let chosen = match requested {
        Some(net) => {
            if let Some(owner) = foreign_claim(net) {
                return Err(format!(
                    "sandbox network {}/{} is already used by the server of {owner}",
                    net.0, net.1
                ));
            }
            if let Some(r) = foreign_route(net) {
                return Err(format!(
                    "sandbox network {}/{} overlaps the host route {r}; choose another with --sandbox-cidr",
                    net.0, net.1
                ));
            }
            net
        }
        None => {
            let mine = claims
                .iter()
                .find(|(_, owner)| owner == &me)
                .map(|(c, _)| *c)
                .filter(|c| foreign_claim(*c).is_none() && foreign_route(*c).is_none());
            match mine {
                Some(c) => c,
                None => (200..=254u8)
                    .map(|b| (Ipv4Addr::new(10, b, 0, 0), 16))
                    .find(|c| foreign_claim(*c).is_none() && foreign_route(*c).is_none())
                    .ok_or("no free sandbox network in 10.200.0.0/16 .. 10.254.0.0/16; pass --sandbox-cidr")?,
            }
        }
    };
    // One claim per data dir: drop this server's other claims.
    for (c, owner) in &claims {
        if owner == &me && *c != chosen {
            let _ = fs::remove_file(claim_path(*c));
        }
    }
    let mut f = fs::File::create(claim_path(chosen)).map_err(|e| format!("claiming: {e}"))?;
    f.write_all(me.as_bytes())
        .map_err(|e| format!("claiming: {e}"))?;
    Ok(chosen)
}

fn read_claims() -> Vec<((Ipv4Addr, u8), String)> {
    let Ok(dir) = fs::read_dir(CLAIMS_DIR) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (a, p) = name.split_once('_')?;
            let net = (a.parse().ok()?, p.parse().ok()?);
            Some((net, fs::read_to_string(e.path()).ok()?))
        })
        .collect()
}

/// The IPv4 nameservers of the host's `/etc/resolv.conf` that a namespace can reach (not
/// loopback: a sandbox cannot reach the host's 127.0.0.0/8).
pub fn resolvers() -> Vec<Ipv4Addr> {
    let text = fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse::<Ipv4Addr>().ok())
        .filter(|a| !a.is_loopback() && !a.is_unspecified())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_parse_with_host_bits_cleared() {
        assert_eq!(
            parse("10.201.3.4/16").unwrap(),
            (Ipv4Addr::new(10, 201, 0, 0), 16)
        );
        for bad in [
            "10.201.0.0",
            "10.201.0.0/30",
            "10.201.0.0/7",
            "x/16",
            "10.0.0.0/abc",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overlap_is_symmetric_and_prefix_aware() {
        let a = (Ipv4Addr::new(10, 201, 0, 0), 16);
        assert!(overlaps(a, (Ipv4Addr::new(10, 201, 7, 0), 24)));
        assert!(overlaps((Ipv4Addr::new(10, 0, 0, 0), 8), a));
        assert!(!overlaps(a, (Ipv4Addr::new(10, 202, 0, 0), 16)));
    }

    #[test]
    fn proc_net_route_parses_without_the_default_route() {
        let text =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
psab-1\t0400C90A\t00000000\t0001\t0\t0\t0\tFCFFFFFF\t0\t0\t0
";
        let r = parse_routes(text);
        if cfg!(target_endian = "little") {
            assert_eq!(
                r,
                vec![
                    (Ipv4Addr::new(192, 0, 2, 0), 24, "eth0".to_string()),
                    (Ipv4Addr::new(10, 201, 0, 4), 30, "psab-1".to_string()),
                ]
            );
        }
    }
}
