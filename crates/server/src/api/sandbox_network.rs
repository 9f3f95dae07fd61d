//! The network policy of a create (issue 7) and what no tenant's policy may name (issue 23
//! findings 1 and 2): `network.allow_out` entries are refused with a 400 when they overlap
//! this server's sandbox network (other sandboxes), the inside network `10.0.2.0/24`, any
//! address of this host (read from the kernel at each check), or broadcast and multicast.
//! The host firewall refuses all of these whatever a policy says; the 400 says so instead of
//! accepting an entry that would silently open nothing.

use crate::error::ApiError;
use crate::host::host_addresses::host_networks;
use crate::host::HostConfig;
use pandastack_api::CreateSandbox;
use pandastack_engine::{EgressRule, NetworkPolicy, GUEST_NET};
use std::net::Ipv4Addr;
use tracing::warn;

/// Most entries in each of `network.allow_out` and `network.deny_out`.
pub const MAX_EGRESS_RULES: usize = 64;

/// Multicast `224.0.0.0/4` and the limited broadcast address: never forwarded to a sandbox's
/// peer (the firewall's `fib daddr type { broadcast, multicast }`).
const NOT_UNICAST: [(Ipv4Addr, u8); 2] = [
    (Ipv4Addr::new(224, 0, 0, 0), 4),
    (Ipv4Addr::new(255, 255, 255, 255), 32),
];

/// The policy of a create: [`network_policy`] over the server default, then
/// [`refuse_protected`] with this host's addresses.
///
/// # Errors
/// As those two; 500 when the host's addresses cannot be read.
pub fn policy_of_create(
    cfg: &HostConfig,
    req: &CreateSandbox,
) -> Result<Option<NetworkPolicy>, ApiError> {
    let policy = network_policy(cfg.default_network_policy(), req)?;
    if let Some(p) = policy.as_ref().filter(|p| !p.allow_out.is_empty()) {
        let host = host_networks().map_err(|e| {
            warn!(error = %e, "reading the host's addresses");
            ApiError::Internal("reading the host's addresses".into())
        })?;
        refuse_protected(p, cfg.network.and_then(|n| n.sandbox_net), &host)?;
    }
    Ok(policy)
}

/// Refuses every `allow_out` entry of `policy` that overlaps what no tenant may open (issue 23
/// findings 1 and 2): `sandbox_net` (this server's sandbox network), [`GUEST_NET`], the
/// networks of `host` (from [`host_networks`]), broadcast and multicast.
///
/// # Errors
/// 400 naming `network.allow_out[i]`, the entry, what it overlaps and, for the host, the
/// operator's flag that opens a host service.
pub fn refuse_protected(
    policy: &NetworkPolicy,
    sandbox_net: Option<(Ipv4Addr, u8)>,
    host: &[(Ipv4Addr, u8)],
) -> Result<(), ApiError> {
    let net = |n: (Ipv4Addr, u8)| {
        if n.1 == 32 {
            n.0.to_string()
        } else {
            format!("{}/{}", n.0, n.1)
        }
    };
    for (i, rule) in policy.allow_out.iter().enumerate() {
        let why = if let Some(s) = sandbox_net.filter(|s| rule.overlaps(*s)) {
            format!(
                "the sandbox network {}: no policy opens another sandbox",
                net(s)
            )
        } else if rule.overlaps(GUEST_NET) {
            format!(
                "the sandboxes' inside network {}: its host services are the operator's to open (--allow-host-service)",
                net(GUEST_NET)
            )
        } else if let Some(h) = host.iter().find(|h| rule.overlaps(**h)) {
            format!(
                "{}, an address of this host: no policy opens the host; the operator opens a host service with --allow-host-service",
                net(*h)
            )
        } else if let Some(m) = NOT_UNICAST.iter().find(|m| rule.overlaps(**m)) {
            format!("{} (broadcast or multicast, never forwarded)", net(*m))
        } else {
            continue;
        };
        return Err(ApiError::BadRequest(format!(
            "network.allow_out[{i}]: {rule} overlaps {why}"
        )));
    }
    Ok(())
}

/// The network policy a create asks for (issue 7): the server default, changed by
/// `allow_internet_access` and the `network` lists.
///
/// # Errors
/// 400 naming the field for a bad entry or too many entries, or for network settings on a
/// server whose sandboxes have no network.
pub fn network_policy(
    default: Option<NetworkPolicy>,
    req: &CreateSandbox,
) -> Result<Option<NetworkPolicy>, ApiError> {
    let Some(mut policy) = default else {
        if req.network.is_some() || req.allow_internet_access == Some(true) {
            return Err(ApiError::BadRequest(
                "network: sandbox networking is off on this server (--sandbox-network none)".into(),
            ));
        }
        return Ok(None);
    };
    if let Some(internet) = req.allow_internet_access {
        policy.internet = internet;
    }
    let rules = |field: &str, list: &Option<Vec<String>>| -> Result<Vec<EgressRule>, ApiError> {
        let list = list.as_deref().unwrap_or_default();
        if list.len() > MAX_EGRESS_RULES {
            return Err(ApiError::BadRequest(format!(
                "{field}: at most {MAX_EGRESS_RULES} entries, got {}",
                list.len()
            )));
        }
        list.iter()
            .enumerate()
            .map(|(i, r)| {
                r.parse()
                    .map_err(|e| ApiError::BadRequest(format!("{field}[{i}]: {e}")))
            })
            .collect()
    };
    if let Some(n) = &req.network {
        policy.allow_out = rules("network.allow_out", &n.allow_out)?;
        policy.deny_out = rules("network.deny_out", &n.deny_out)?;
    }
    Ok(Some(policy))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(json: &str) -> CreateSandbox {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn network_fields_become_a_policy_or_a_400_naming_the_field() {
        let open = Some(NetworkPolicy::open());
        let p = network_policy(open.clone(), &req("{}")).unwrap().unwrap();
        assert_eq!(p, NetworkPolicy::open());
        let p = network_policy(
            open.clone(),
            &req(r#"{"allow_internet_access": false, "network": {"allow_out": ["10.99.0.1:80"]}}"#),
        )
        .unwrap()
        .unwrap();
        assert!(!p.internet);
        assert_eq!(p.allow_out[0].to_string(), "10.99.0.1:80");
        let e = network_policy(
            open.clone(),
            &req(r#"{"network": {"deny_out": ["1.2.3.4", "10.0.0.0/40"]}}"#),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("network.deny_out[1]"), "{e}");
        let e = network_policy(None, &req(r#"{"network": {}}"#))
            .unwrap_err()
            .to_string();
        assert!(e.contains("networking is off"), "{e}");
        assert_eq!(
            network_policy(None, &req(r#"{"allow_internet_access": false}"#)).unwrap(),
            None
        );
        let many: Vec<String> = (0..65).map(|i| format!("\"203.0.113.{i}\"")).collect();
        let body = format!(r#"{{"network": {{"allow_out": [{}]}}}}"#, many.join(","));
        let e = network_policy(open, &req(&body)).unwrap_err().to_string();
        assert!(e.contains("at most 64"), "{e}");
    }

    #[test]
    fn allow_out_naming_a_sandbox_or_the_host_is_a_400_naming_the_entry() {
        let policy = |rules: &[&str]| NetworkPolicy {
            internet: false,
            allow_out: rules
                .iter()
                .map(|r| r.parse::<EgressRule>().unwrap())
                .collect(),
            deny_out: vec![],
        };
        let sandboxes = Some((Ipv4Addr::new(10, 201, 0, 0), 16));
        let host = [
            (Ipv4Addr::new(127, 0, 0, 0), 8),
            (Ipv4Addr::new(192, 0, 2, 10), 32),
        ];
        let refused = |rules: &[&str]| {
            refuse_protected(&policy(rules), sandboxes, &host)
                .unwrap_err()
                .to_string()
        };
        let e = refused(&["203.0.113.7", "10.201.0.6:8000"]);
        assert!(e.contains("network.allow_out[1]: 10.201.0.6:8000"), "{e}");
        assert!(e.contains("sandbox network 10.201.0.0/16"), "{e}");
        let e = refused(&["10.0.2.2:5432"]);
        assert!(
            e.contains("network.allow_out[0]") && e.contains("10.0.2.0/24"),
            "{e}"
        );
        let e = refused(&["192.0.2.0/24:22"]);
        assert!(e.contains("192.0.2.10, an address of this host"), "{e}");
        assert!(e.contains("--allow-host-service"), "{e}");
        assert!(refused(&["127.0.0.53"]).contains("127.0.0.0/8"));
        assert!(refused(&["0.0.0.0/0"]).contains("network.allow_out[0]"));
        assert!(refused(&["239.1.1.1"]).contains("multicast"));
        refuse_protected(
            &policy(&["10.99.0.1:8080", "203.0.113.0/24", "10.202.0.6"]),
            sandboxes,
            &host,
        )
        .unwrap();
    }
}
