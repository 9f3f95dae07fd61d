//! `pandastack server --database-*` and the databases' workspace limits (issue 10; issue 23
//! finding 7), parsed into [`DatabaseSettings`].

use clap::Args;
use pandastack_server::databases::quota::DatabaseLimits;
use pandastack_server::databases::DatabaseSettings;
use std::path::PathBuf;

/// The database flags of `pandastack server`.
#[derive(Args)]
pub struct DatabaseFlags {
    /// Seconds without a connection after which a database that is not always_on is stopped
    /// (the next connection starts it again).
    #[arg(
        long,
        env = "PANDASTACK_DATABASE_IDLE_STOP_SECONDS",
        default_value_t = 600
    )]
    database_idle_stop_seconds: u64,
    /// TCP ports given to databases (FIRST-LAST), on 127.0.0.1 and the sandboxes' gateway.
    #[arg(long, env = "PANDASTACK_DATABASE_PORTS", default_value = "15432-16431", value_parser = parse_port_range)]
    database_ports: std::ops::RangeInclusive<u16>,
    /// fsync of the database clusters: `off` loses committed transactions on a host crash
    /// (tests only).
    #[arg(long, env = "PANDASTACK_DATABASE_FSYNC", default_value = "on", value_parser = ["on", "off"])]
    database_fsync: String,
    /// Directory of PostgreSQL's programs (postgres, initdb, pg_basebackup).
    #[arg(
        long,
        env = "PANDASTACK_POSTGRES_BIN",
        default_value = "/usr/lib/postgresql/15/bin"
    )]
    postgres_bin: PathBuf,
    /// Databases one workspace may keep; past it creates and clones answer 429.
    #[arg(long, env = "PANDASTACK_WORKSPACE_MAX_DATABASES", default_value_t = 10)]
    workspace_max_databases: usize,
    /// Percent of --database-ports one workspace's databases may hold (at least one port);
    /// past it creates and clones answer 429.
    #[arg(
        long,
        env = "PANDASTACK_WORKSPACE_DATABASE_PORTS_PERCENT",
        default_value_t = 25,
        value_parser = clap::value_parser!(u8).range(1..=100)
    )]
    workspace_database_ports_percent: u8,
    /// GiB the memory limits (sizes) of running databases may add up to on this host
    /// (default: the host's memory); past it, or past the host's memory budget shared with
    /// sandboxes, creates and wakes answer 503.
    #[arg(long, env = "PANDASTACK_DATABASE_MEMORY_GB", value_parser = parse_gb)]
    database_memory_gb: Option<f64>,
}

impl DatabaseFlags {
    /// The server's database settings.
    pub fn settings(self) -> DatabaseSettings {
        DatabaseSettings {
            idle_stop_seconds: self.database_idle_stop_seconds,
            ports: self.database_ports,
            fsync: self.database_fsync == "on",
            postgres_bin: self.postgres_bin,
            limits: DatabaseLimits {
                workspace_max_databases: self.workspace_max_databases,
                workspace_ports_percent: self.workspace_database_ports_percent,
                memory_mb: self.database_memory_gb.map(|gb| (gb * 1024.0) as u64),
            },
        }
    }
}

/// `FIRST-LAST` with FIRST <= LAST, both non-zero ports.
fn parse_port_range(s: &str) -> Result<std::ops::RangeInclusive<u16>, String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("'{s}' is not FIRST-LAST"))?;
    let (a, b): (u16, u16) = (
        a.trim()
            .parse()
            .map_err(|_| format!("'{a}' is not a port"))?,
        b.trim()
            .parse()
            .map_err(|_| format!("'{b}' is not a port"))?,
    );
    if a == 0 || a > b {
        return Err(format!("'{s}': FIRST must be between 1 and LAST"));
    }
    Ok(a..=b)
}

/// A positive, finite number of GiB.
fn parse_gb(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(gb) if gb.is_finite() && gb > 0.0 => Ok(gb),
        _ => Err(format!("'{s}' is not a positive number of GiB")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        databases: DatabaseFlags,
    }

    fn parse(args: &[&str]) -> Result<DatabaseSettings, String> {
        Flags::try_parse_from([&["server"], args].concat())
            .map(|f| f.databases.settings())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn database_limits_have_defaults_and_refuse_nonsense() {
        let d = parse(&[]).unwrap();
        assert_eq!(
            d.limits,
            DatabaseLimits {
                workspace_max_databases: 10,
                workspace_ports_percent: 25,
                memory_mb: None
            }
        );
        let set = parse(&[
            "--workspace-max-databases",
            "2",
            "--workspace-database-ports-percent",
            "50",
            "--database-memory-gb",
            "1.5",
        ])
        .unwrap();
        assert_eq!(set.limits.workspace_max_databases, 2);
        assert_eq!(set.limits.workspace_ports_percent, 50);
        assert_eq!(set.limits.memory_mb, Some(1536));
        for bad in [
            ["--workspace-database-ports-percent", "0"],
            ["--workspace-database-ports-percent", "101"],
            ["--database-memory-gb", "0"],
            ["--database-memory-gb", "lots"],
            ["--database-memory-gb", "inf"],
            ["--database-ports", "20-10"],
        ] {
            let err = parse(&bad).unwrap_err();
            assert!(err.contains(bad[0]), "{bad:?}: {err}");
        }
    }
}
