//! Sandbox networking settings of `pandastack server` (issue 7) and what the gVisor engine
//! gets of them: the data dir's tag names everything the server makes on the host, and the
//! operator's host services (issue 23 finding 2) are the only host ports beyond the database
//! front end that a sandbox reaches.

use crate::{data_dir_tag, ServerConfig, StartError};
use std::net::SocketAddrV4;

/// Sandbox networking settings of `pandastack server` (issue 7).
#[derive(Debug, Clone)]
pub struct NetworkSettings {
    /// `--sandbox-network sandbox` (true: a network namespace per sandbox) or `none`
    /// (loopback only).
    pub enabled: bool,
    /// `--sandbox-egress allow|deny`: whether sandboxes reach public addresses by default.
    pub internet_default: bool,
    /// `--sandbox-cidr`: the host-side range of sandbox addresses (default: a free /16 of
    /// 10.200-10.254 claimed for this data dir).
    pub cidr: Option<String>,
    /// `--netns-stock`: network namespaces made ahead of time.
    pub netns_stock: usize,
    /// `--preview-host-suffix`: serve `{port}-{id}.{suffix}` as previews.
    pub preview_host_suffix: Option<String>,
    /// `--public-previews`: previews need no token.
    pub public_previews: bool,
    /// `--allow-host-service ADDR:PORT` (repeatable): host services every sandbox reaches,
    /// TCP and UDP, whatever its policy (issue 23 finding 2: a tenant's `allow_out` never
    /// opens the host).
    pub host_services: Vec<String>,
    /// `--sandbox-resolver`: the DNS resolver behind every sandbox's `10.0.2.3` (default: the
    /// first usable nameserver of `/etc/resolv.conf`).
    pub resolver: Option<String>,
}

/// Parses the `--allow-host-service` values: `A.B.C.D:PORT`, port 1-65535.
///
/// # Errors
/// [`StartError::Config`] naming the flag and the value.
pub fn host_services(values: &[String]) -> Result<Vec<SocketAddrV4>, StartError> {
    values
        .iter()
        .map(|v| {
            v.parse::<SocketAddrV4>()
                .ok()
                .filter(|a| a.port() != 0)
                .ok_or_else(|| {
                    StartError::Config(format!(
                        "--allow-host-service: '{v}' is not an IPv4 address with a port (e.g. 192.0.2.10:8080)"
                    ))
                })
        })
        .collect()
}

/// The engine's networking settings: this data dir's tag (the first 6 hex digits of the SHA-256
/// of its canonical path) names everything the server makes on the host.
///
/// # Errors
/// [`StartError::Config`] for a bad `--sandbox-cidr` or `--allow-host-service`; I/O errors
/// resolving the data dir.
pub fn network_config(
    cfg: &ServerConfig,
) -> Result<Option<pandastack_gvisor::net::NetConfig>, StartError> {
    if !cfg.network.enabled {
        return Ok(None);
    }
    let data_dir = std::fs::canonicalize(&cfg.data_dir)?;
    let cidr = cfg
        .network
        .cidr
        .as_deref()
        .map(pandastack_gvisor::net::parse_cidr)
        .transpose()
        .map_err(|e| StartError::Config(format!("--sandbox-cidr: {e}")))?;
    Ok(Some(pandastack_gvisor::net::NetConfig {
        tag: data_dir_tag(&data_dir),
        data_dir,
        cidr,
        stock: cfg.network.netns_stock,
        host_services: host_services(&cfg.network.host_services)?,
        resolver: match cfg.network.resolver.as_deref() {
            None => None,
            Some(r) => Some(r.parse().map_err(|_| {
                StartError::Config(format!("--sandbox-resolver: '{r}' is not an IPv4 address"))
            })?),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_services_need_an_address_and_a_port() {
        let ok = host_services(&["192.0.2.10:8080".into(), "10.0.2.2:53".into()]).unwrap();
        assert_eq!(ok[0].to_string(), "192.0.2.10:8080");
        for bad in [
            "192.0.2.10",
            "192.0.2.10:0",
            "host:80",
            "[::1]:80",
            "192.0.2.10:70000",
        ] {
            let e = host_services(&[bad.into()]).unwrap_err().to_string();
            assert!(e.contains("--allow-host-service") && e.contains(bad), "{e}");
        }
    }
}
