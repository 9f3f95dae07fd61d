//! The sandbox networking flags of `pandastack server` (issue 7; issue 23 findings 2 and 12
//! for `--allow-host-service` and `--sandbox-resolver`).

use clap::Args;

/// Sandbox networking flags, flattened into `pandastack server`.
#[derive(Args)]
pub struct NetworkArgs {
    /// Sandbox network: `sandbox` (a network namespace per sandbox, NAT egress under a
    /// policy) or `none` (loopback only).
    #[arg(long, env = "PANDASTACK_SANDBOX_NETWORK", default_value = "sandbox", value_parser = ["sandbox", "none"])]
    pub sandbox_network: String,
    /// Whether sandboxes reach public addresses when their create does not say.
    #[arg(long, env = "PANDASTACK_SANDBOX_EGRESS", default_value = "allow", value_parser = ["allow", "deny"])]
    pub sandbox_egress: String,
    /// Host-side address range of sandboxes (A.B.C.D/N, N <= 28); default: a free /16 of
    /// 10.200.0.0-10.254.255.255, kept for this data dir.
    #[arg(long, env = "PANDASTACK_SANDBOX_CIDR")]
    pub sandbox_cidr: Option<String>,
    /// A host service every sandbox may reach, TCP and UDP, whatever its policy: A.B.C.D:PORT,
    /// repeatable (a tenant's allow_out never opens the host).
    #[arg(
        long = "allow-host-service",
        env = "PANDASTACK_ALLOW_HOST_SERVICE",
        value_delimiter = ','
    )]
    pub allow_host_service: Vec<String>,
    /// DNS resolver behind every sandbox's 10.0.2.3 (default: from /etc/resolv.conf).
    #[arg(long, env = "PANDASTACK_SANDBOX_RESOLVER")]
    pub sandbox_resolver: Option<String>,
    /// Network namespaces made ahead of time (restores and forks take one at once).
    #[arg(long, env = "PANDASTACK_NETNS_STOCK", default_value_t = 8)]
    pub netns_stock: usize,
    /// Serve `{port}-{sandbox id}.{SUFFIX}` hosts as previews of that port (preview_url()).
    #[arg(long, env = "PANDASTACK_PREVIEW_HOST_SUFFIX")]
    pub preview_host_suffix: Option<String>,
    /// Previews need no preview token (anyone who can reach the server can open them).
    #[arg(long, env = "PANDASTACK_PUBLIC_PREVIEWS")]
    pub public_previews: bool,
}

impl NetworkArgs {
    /// The server's settings from these flags (values are checked when the server starts).
    pub fn settings(self) -> pandastack_server::NetworkSettings {
        pandastack_server::NetworkSettings {
            enabled: self.sandbox_network == "sandbox",
            internet_default: self.sandbox_egress == "allow",
            cidr: self.sandbox_cidr,
            netns_stock: self.netns_stock,
            preview_host_suffix: self.preview_host_suffix,
            public_previews: self.public_previews,
            host_services: self.allow_host_service,
            resolver: self.sandbox_resolver,
        }
    }
}
