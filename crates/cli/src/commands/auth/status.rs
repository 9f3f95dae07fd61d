//! `auth status`: prints the API URL and key prefix in use with where each came from, then asks
//! `GET /v1/me` whether the server accepts the key. Exits 1 when there is no key or the check
//! fails (the error line says why), so scripts can test it.

use crate::commands::{client_for, Ctx};
use crate::config::{Settings, ENV_API, ENV_API_KEY};
use crate::error::{CliError, Result};
use crate::output;
use serde_json::json;

/// Characters of a key shown (its public prefix, `pds_` included).
pub const SHOWN_KEY_CHARS: usize = 12;

/// The public prefix of a key, never the secret part.
pub fn key_prefix(key: &str) -> String {
    key.chars().take(SHOWN_KEY_CHARS).collect()
}

/// Prints the status.
pub fn run(ctx: &Ctx) -> Result<()> {
    let s = Settings::resolve()?;
    let prefix = s.api_key.as_deref().map(key_prefix);
    let key_line = match &prefix {
        Some(p) => format!("{p}... ({})", s.api_key_source.label(ENV_API_KEY)),
        None => "none".into(),
    };
    let checked = match &s.api_key {
        None => Err(CliError::Config(
            "no API key: set PANDASTACK_API_KEY or run `pandastack auth login --key KEY`".into(),
        )),
        Some(key) => {
            client_for(&s.api_url, key).and_then(|c| ctx.block(c.me()).map_err(CliError::from))
        }
    };
    let workspace = checked.as_ref().ok().map(|me| me.workspace_id.clone());
    if ctx.json() {
        output::json(&json!({
            "api_url": s.api_url,
            "api_url_source": s.api_url_source.label(ENV_API),
            "key_prefix": prefix,
            "key_source": prefix.as_ref().map(|_| s.api_key_source.label(ENV_API_KEY)),
            "workspace_id": workspace,
        }))?;
    } else {
        output::pairs(&[
            (
                "api_url",
                format!("{} ({})", s.api_url, s.api_url_source.label(ENV_API)),
            ),
            ("key", key_line),
            ("workspace", workspace.clone().unwrap_or_else(|| "-".into())),
        ])?;
    }
    checked.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_prefix_is_shown() {
        assert_eq!(key_prefix("pds_abcdefghSECRETSECRET"), "pds_abcdefgh");
        assert_eq!(key_prefix("short"), "short");
    }
}
