//! Size tiers of a database (contract §2.12: `size` is a RAM tier, `1g` by default, `4g`,
//! `16g`). A tier is the memory limit of the cluster's cgroup and the PostgreSQL settings that
//! fit in it.

use std::fmt;

/// One size tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    G1,
    G4,
    G16,
}

/// `size` is not one of the tiers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("size must be one of 1g, 4g, 16g, got '{0}'")]
pub struct TierError(pub String);

impl Tier {
    /// Every tier, smallest first.
    pub const ALL: [Tier; 3] = [Tier::G1, Tier::G4, Tier::G16];

    /// Parses `1g`, `4g` or `16g` (case-insensitive).
    ///
    /// # Errors
    /// [`TierError`] quoting the input (at most 40 characters of it).
    pub fn parse(s: &str) -> Result<Tier, TierError> {
        match s.to_ascii_lowercase().as_str() {
            "1g" => Ok(Tier::G1),
            "4g" => Ok(Tier::G4),
            "16g" => Ok(Tier::G16),
            _ => Err(TierError(s.chars().take(40).collect())),
        }
    }

    /// The tier whose memory is `mb` MiB, if there is one (the SDKs may send `memory_mb`).
    pub fn from_memory_mb(mb: u64) -> Option<Tier> {
        Tier::ALL
            .into_iter()
            .find(|t| u64::from(t.memory_mb()) == mb)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::G1 => "1g",
            Tier::G4 => "4g",
            Tier::G16 => "16g",
        }
    }

    /// Memory limit of the cluster (all its processes), MiB.
    pub fn memory_mb(self) -> u32 {
        match self {
            Tier::G1 => 1024,
            Tier::G4 => 4096,
            Tier::G16 => 16384,
        }
    }

    /// `shared_buffers`, MiB: a quarter of the memory, PostgreSQL's usual advice (the pages
    /// count against the cgroup only once touched).
    pub fn shared_buffers_mb(self) -> u32 {
        self.memory_mb() / 4
    }

    /// `max_connections`.
    pub fn max_connections(self) -> u32 {
        match self {
            Tier::G1 => 100,
            Tier::G4 => 200,
            Tier::G16 => 400,
        }
    }

    /// The PostgreSQL settings of this tier, as `name=value` pairs.
    pub fn settings(self) -> Vec<(&'static str, String)> {
        let mb = self.memory_mb();
        vec![
            ("shared_buffers", format!("{}MB", self.shared_buffers_mb())),
            ("effective_cache_size", format!("{}MB", mb * 3 / 4)),
            ("max_connections", self.max_connections().to_string()),
            ("work_mem", format!("{}MB", (mb / 256).max(4))),
            ("maintenance_work_mem", format!("{}MB", (mb / 16).max(64))),
        ]
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_parse_and_size() {
        assert_eq!(Tier::parse("1g"), Ok(Tier::G1));
        assert_eq!(Tier::parse("16G"), Ok(Tier::G16));
        assert!(Tier::parse("2g").is_err());
        assert!(Tier::parse("").is_err());
        assert_eq!(Tier::G4.memory_mb(), 4096);
        assert_eq!(Tier::from_memory_mb(16384), Some(Tier::G16));
        assert_eq!(Tier::from_memory_mb(512), None);
        let s = Tier::G1.settings();
        assert!(
            s.contains(&("shared_buffers", "256MB".to_string())),
            "{s:?}"
        );
        assert!(s.contains(&("max_connections", "100".to_string())));
    }
}
