//! Which `/metrics` series a caller may read (issue 23 finding 8).
//!
//! The registry is process-wide, so a scrape gathers every series and this module removes the
//! ones that name another workspace's resources before encoding. An operator (a key of the
//! first workspace) and `--public-metrics` scrapers read everything; any other workspace key
//! reads the host-wide series that carry no ids (request latency by route, sandboxes by
//! state, ...) and, of the series labelled with an id, only those of its own resources:
//! `database` (a database id), `sandbox` / `sandbox_id`, `workspace` / `workspace_id`, and
//! `template` when it names a user template (`<name>@<workspace id>`). A family whose every
//! series was removed is left out (the text format has no empty family). A new series
//! labelled with a resource id must have its label added to [`ID_LABELS`].

use prometheus::proto::MetricFamily;
use std::collections::HashSet;

/// Labels whose value is the id of a workspace's resource (sandbox, database, workspace).
pub const ID_LABELS: [&str; 6] = [
    "database",
    "sandbox",
    "sandbox_id",
    "workspace",
    "workspace_id",
    "volume",
];

/// What a scrape may see.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every series: an operator key or `--public-metrics`.
    All,
    /// One workspace's series and the host-wide ones.
    Workspace {
        /// The caller's workspace id (`ws-...`).
        workspace_id: String,
        /// Ids of its resources (sandboxes, databases, volumes) on this host.
        owned: HashSet<String>,
    },
}

impl Scope {
    /// Whether a series with these `(label, value)` pairs may be shown.
    fn shows<'a>(&self, labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
        let Scope::Workspace {
            workspace_id,
            owned,
        } = self
        else {
            return true;
        };
        labels.into_iter().all(|(name, value)| {
            if name == "template" {
                return value
                    .split_once('@')
                    .is_none_or(|(_, ws)| ws == workspace_id);
            }
            !ID_LABELS.contains(&name) || value == workspace_id || owned.contains(value)
        })
    }

    /// `families` without the series this scope may not see.
    pub fn filter(&self, families: Vec<MetricFamily>) -> Vec<MetricFamily> {
        if matches!(self, Scope::All) {
            return families;
        }
        families
            .into_iter()
            .filter_map(|mut family| {
                family.mut_metric().retain(|m| {
                    self.shows(m.get_label().iter().map(|l| (l.get_name(), l.get_value())))
                });
                (!family.get_metric().is_empty()).then_some(family)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{IntGaugeVec, Opts, Registry};

    #[test]
    fn a_workspace_sees_its_own_series_and_host_totals() {
        let registry = Registry::new();
        let storage = IntGaugeVec::new(Opts::new("db_bytes", "x"), &["database"]).unwrap();
        let pool = IntGaugeVec::new(Opts::new("pool", "x"), &["template", "state"]).unwrap();
        let only_other = IntGaugeVec::new(Opts::new("other_only", "x"), &["sandbox"]).unwrap();
        registry.register(Box::new(storage.clone())).unwrap();
        registry.register(Box::new(pool.clone())).unwrap();
        registry.register(Box::new(only_other.clone())).unwrap();
        storage.with_label_values(&["db-mine"]).set(1);
        storage.with_label_values(&["db-theirs"]).set(2);
        pool.with_label_values(&["base", "ready"]).set(2);
        pool.with_label_values(&["app@ws-a", "ready"]).set(1);
        pool.with_label_values(&["app@ws-b", "ready"]).set(1);
        only_other.with_label_values(&["sb-theirs"]).set(1);
        let scope = Scope::Workspace {
            workspace_id: "ws-a".into(),
            owned: HashSet::from(["db-mine".to_string()]),
        };
        let kept = scope.filter(registry.gather());
        let series: Vec<String> = kept
            .iter()
            .flat_map(|f| {
                f.get_metric().iter().map(move |m| {
                    let labels: Vec<&str> = m.get_label().iter().map(|l| l.get_value()).collect();
                    format!("{}{:?}", f.get_name(), labels)
                })
            })
            .collect();
        assert_eq!(
            series,
            [
                "db_bytes[\"db-mine\"]",
                // Labels come sorted by name: state, template.
                "pool[\"ready\", \"app@ws-a\"]",
                "pool[\"ready\", \"base\"]"
            ]
        );
        assert_eq!(Scope::All.filter(registry.gather()).len(), 3);
    }
}
