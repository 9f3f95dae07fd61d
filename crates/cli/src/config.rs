//! Where the client finds the server and its API key (contract §1.1, same order and file as the
//! Python SDK):
//!
//! - URL: env `PANDASTACK_API`, then `api_url` in the config file, then
//!   [`DEFAULT_API_URL`]. Trailing `/`s are stripped.
//! - Key: env `PANDASTACK_API_KEY`, then `token`, then `api_key` in the config file.
//!   Empty values count as unset.
//!
//! The config file is `$HOME/.config/pandastack/config.json`, a JSON object written by
//! `pandastack auth login` with mode 0600. Other keys in it are kept when it is rewritten.

use crate::error::{CliError, Result};
use serde_json::{Map, Value};
use std::path::PathBuf;

/// URL used when neither the environment nor the config file names one.
pub const DEFAULT_API_URL: &str = "http://127.0.0.1:7700";
/// Environment variable with the API base URL.
pub const ENV_API: &str = "PANDASTACK_API";
/// Environment variable with the API key.
pub const ENV_API_KEY: &str = "PANDASTACK_API_KEY";

/// Where a setting came from (shown by `pandastack auth status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An environment variable.
    Env,
    /// The config file.
    File,
    /// The built-in default.
    Default,
}

impl Source {
    /// A short label: `env PANDASTACK_API`, `config file`, `default`.
    pub fn label(self, env_name: &str) -> String {
        match self {
            Source::Env => format!("env {env_name}"),
            Source::File => "config file".into(),
            Source::Default => "default".into(),
        }
    }
}

/// The resolved client settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Base URL without trailing `/`, e.g. `http://127.0.0.1:7700`.
    pub api_url: String,
    /// Where `api_url` came from.
    pub api_url_source: Source,
    /// The API key (`pds_...`), if any.
    pub api_key: Option<String>,
    /// Where `api_key` came from (meaningless when `api_key` is `None`).
    pub api_key_source: Source,
}

impl Settings {
    /// Reads the environment and the config file.
    ///
    /// Errors: the config file exists but is not a JSON object.
    pub fn resolve() -> Result<Settings> {
        let file = match config_path() {
            Some(p) => read_file(&p)?,
            None => Map::new(),
        };
        Ok(resolve_from(
            env_value(ENV_API),
            env_value(ENV_API_KEY),
            &file,
        ))
    }
}

fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn file_str(file: &Map<String, Value>, key: &str) -> Option<String> {
    file.get(key)
        .and_then(Value::as_str)
        .filter(|v| !v.trim().is_empty())
        .map(str::to_string)
}

/// The pure part of [`Settings::resolve`]: env values, then the file's keys, then defaults.
pub fn resolve_from(
    env_api: Option<String>,
    env_key: Option<String>,
    file: &Map<String, Value>,
) -> Settings {
    let (api_url, api_url_source) = match (env_api, file_str(file, "api_url")) {
        (Some(u), _) => (u, Source::Env),
        (None, Some(u)) => (u, Source::File),
        (None, None) => (DEFAULT_API_URL.to_string(), Source::Default),
    };
    let (api_key, api_key_source) = match (
        env_key,
        file_str(file, "token").or_else(|| file_str(file, "api_key")),
    ) {
        (Some(k), _) => (Some(k), Source::Env),
        (None, Some(k)) => (Some(k), Source::File),
        (None, None) => (None, Source::Default),
    };
    Settings {
        api_url: api_url.trim().trim_end_matches('/').to_string(),
        api_url_source,
        api_key,
        api_key_source,
    }
}

/// `$HOME/.config/pandastack/config.json`, or `None` when `HOME` is unset.
pub fn config_path() -> Option<PathBuf> {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
    Some(
        PathBuf::from(home)
            .join(".config")
            .join("pandastack")
            .join("config.json"),
    )
}

/// Reads the config file; a missing file is an empty object.
///
/// Errors: the file cannot be read or is not a JSON object.
pub fn read_file(path: &std::path::Path) -> Result<Map<String, Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
        Err(e) => return Err(CliError::io(format!("reading {}", path.display()), e)),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(CliError::Config(format!(
            "config file {} is not a JSON object",
            path.display()
        ))),
        Err(e) => Err(CliError::Config(format!(
            "config file {} is not valid JSON: {e}",
            path.display()
        ))),
    }
}

/// Sets `api_url` and `token` in the config file, keeping its other keys; creates the
/// directory, and writes the file with mode 0600 (it holds a secret) via a temp file + rename.
///
/// Errors: no `HOME`, the existing file is not a JSON object, or a write fails.
pub fn save_login(api_url: &str, token: &str) -> Result<PathBuf> {
    let path = config_path().ok_or_else(|| {
        CliError::Config("HOME is not set: cannot locate ~/.config/pandastack".into())
    })?;
    let mut file = read_file(&path)?;
    file.insert(
        "api_url".into(),
        Value::String(api_url.trim_end_matches('/').to_string()),
    );
    file.insert("token".into(), Value::String(token.to_string()));
    let dir = path.parent().map(PathBuf::from).unwrap_or_default();
    std::fs::create_dir_all(&dir)
        .map_err(|e| CliError::io(format!("creating {}", dir.display()), e))?;
    let text = serde_json::to_string_pretty(&Value::Object(file))
        .map_err(|e| CliError::Config(format!("encoding config: {e}")))?;
    let tmp = dir.join(format!(".config.json.{}.tmp", std::process::id()));
    write_private(&tmp, text.as_bytes())
        .map_err(|e| CliError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::io(format!("writing {}", path.display()), e)
    })?;
    Ok(path)
}

fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.write_all(b"\n")?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn env_wins_over_file() {
        let file = obj(json!({"api_url": "http://file:1", "token": "pds_file"}));
        let s = resolve_from(Some("http://env:2/".into()), Some("pds_env".into()), &file);
        assert_eq!(s.api_url, "http://env:2");
        assert_eq!(s.api_url_source, Source::Env);
        assert_eq!(s.api_key.as_deref(), Some("pds_env"));
        assert_eq!(s.api_key_source, Source::Env);
    }

    #[test]
    fn file_then_default() {
        let file = obj(json!({"api_url": "http://file:1//", "api_key": "pds_old"}));
        let s = resolve_from(None, None, &file);
        assert_eq!(s.api_url, "http://file:1");
        assert_eq!(s.api_key.as_deref(), Some("pds_old"));
        assert_eq!(s.api_key_source, Source::File);
        let file = obj(json!({"token": "pds_new", "api_key": "pds_old"}));
        assert_eq!(
            resolve_from(None, None, &file).api_key.as_deref(),
            Some("pds_new")
        );
        let s = resolve_from(None, None, &Map::new());
        assert_eq!(s.api_url, DEFAULT_API_URL);
        assert_eq!(s.api_url_source, Source::Default);
        assert_eq!(s.api_key, None);
    }

    #[test]
    fn empty_file_values_are_unset() {
        let file = obj(json!({"api_url": "", "token": " "}));
        let s = resolve_from(None, None, &file);
        assert_eq!(s.api_url, DEFAULT_API_URL);
        assert_eq!(s.api_key, None);
    }
}
