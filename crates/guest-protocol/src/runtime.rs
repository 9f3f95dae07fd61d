//! What every sandbox process starts with, and the runtime defaults a template can carry in its
//! own rootfs.
//!
//! The guest daemon gives every process it spawns [`DEFAULT_ENV`] (where the sandbox's inherited
//! environment leaves a variable unset). A template built from a Dockerfile records its final
//! `ENV` and `WORKDIR` in [`TEMPLATE_RUNTIME_PATH`] inside its rootfs; the guest, as PID 1, reads
//! that file once at start, so every path to a running sandbox (cold boot, template snapshot,
//! warm pool, user snapshot, fork, wake) sees the same defaults without the host passing them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Variables every process gets unless the sandbox's own environment already sets them.
pub const DEFAULT_ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("HOME", "/root"),
    ("LANG", "C.UTF-8"),
    ("PYTHONUNBUFFERED", "1"),
    ("MPLBACKEND", "Agg"),
];

/// Where a template's runtime defaults live inside its rootfs (absolute, in-sandbox path).
pub const TEMPLATE_RUNTIME_PATH: &str = "/etc/pandastack/template.json";

/// The JSON document at [`TEMPLATE_RUNTIME_PATH`]: `{"env": {"K": "V"}, "workdir": "/app"}`.
/// Unknown keys are ignored, so later builders can add fields without breaking older guests.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateRuntime {
    /// Variables set on top of [`DEFAULT_ENV`] for every process (Dockerfile `ENV`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Default working directory of commands and kernels (Dockerfile `WORKDIR`); the guest
    /// falls back to `/workspace` when it is absent or not a directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_round_trips_and_tolerates_unknown_keys() {
        let rt: TemplateRuntime =
            serde_json::from_str(r#"{"env":{"A":"1"},"workdir":"/app","user":"bob"}"#)
                .expect("parses");
        assert_eq!(rt.env["A"], "1");
        assert_eq!(rt.workdir.as_deref(), Some("/app"));
        let empty: TemplateRuntime = serde_json::from_str("{}").expect("parses");
        assert_eq!(empty, TemplateRuntime::default());
        assert_eq!(
            serde_json::to_string(&empty).expect("encodes"),
            r#"{"env":{}}"#
        );
    }
}
