//! The host's own IPv4 addresses, read from the kernel (`getifaddrs(3)`) each time they are
//! asked for, so an address added after start-up (DHCP, a new link) counts at once. A
//! tenant's `allow_out` may not name any of them (issue 23 finding 2); the firewall refuses
//! them anyway (`fib daddr type local`), this only lets the API say so with a 400.

use std::net::Ipv4Addr;

/// Networks that are this host, as `(address, prefix length)`: every interface address as
/// a /32, the whole network of a loopback address (`127.0.0.0/8`: all of it is local), and
/// every interface's broadcast address. Sandbox links' host ends are among them.
///
/// # Errors
/// The error of `getifaddrs(3)`.
pub fn host_networks() -> std::io::Result<Vec<(Ipv4Addr, u8)>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs only writes the head of a list it allocates into `head`; the list is
    // freed once below and not used after.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not freed yet.
        let ifa = unsafe { &*cur };
        if let Some(addr) = ipv4_of(ifa.ifa_addr) {
            let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
            let prefix = match ipv4_of(ifa.ifa_netmask) {
                Some(mask) if loopback => u32::from(mask).count_ones() as u8,
                _ => 32,
            };
            let mask = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - prefix)
            };
            out.push((Ipv4Addr::from(u32::from(addr) & mask), prefix));
        }
        if ifa.ifa_flags & libc::IFF_BROADCAST as u32 != 0 {
            out.extend(ipv4_of(ifa.ifa_ifu).map(|b| (b, 32)));
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed exactly once.
    unsafe { libc::freeifaddrs(head) };
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The IPv4 address in `sa`, when it is an `AF_INET` socket address.
fn ipv4_of(sa: *const libc::sockaddr) -> Option<Ipv4Addr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: a non-null address in a getifaddrs node points to a socket address whose
    // family field is valid to read.
    if i32::from(unsafe { (*sa).sa_family }) != libc::AF_INET {
        return None;
    }
    // SAFETY: an AF_INET socket address is a `sockaddr_in`.
    let sin = unsafe { &*(sa as *const libc::sockaddr_in) };
    Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_a_whole_network_of_the_host() {
        let nets = host_networks().unwrap();
        assert!(nets.contains(&(Ipv4Addr::new(127, 0, 0, 0), 8)), "{nets:?}");
    }
}
