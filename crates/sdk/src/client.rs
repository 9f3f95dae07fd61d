//! [`Client`]: one configured connection to a PandaStack server, and [`ClientBuilder`].
//!
//! Configuration as the Python SDK reads it (contract §1.1, §1.4), except the config file, which
//! is the CLI's: URL from [`ClientBuilder::api_url`], else env `PANDASTACK_API`, else
//! [`DEFAULT_API_URL`]; key from [`ClientBuilder::api_key`], else env `PANDASTACK_API_KEY`.
//! A base that already ends in `/v1` gets no second `/v1`; a path prefix is kept.

use crate::error::{Error, Result};
use reqwest::Url;
use std::sync::Arc;
use std::time::Duration;

/// URL used when neither the builder nor `PANDASTACK_API` names one (a local server).
pub const DEFAULT_API_URL: &str = "http://127.0.0.1:7700";
/// Environment variable with the API base URL.
pub const ENV_API: &str = "PANDASTACK_API";
/// Environment variable with the API key.
pub const ENV_API_KEY: &str = "PANDASTACK_API_KEY";
/// Environment variable with the warm-up retry deadline, seconds (contract §1.4).
pub const ENV_READY_TIMEOUT: &str = "PANDASTACK_EXEC_READY_TIMEOUT";
/// Environment variable with the capacity retry budget, seconds (contract §1.4).
pub const ENV_MAX_CREATE_RETRY: &str = "PANDASTACK_MAX_CREATE_RETRY_SECONDS";

/// Deadline of an ordinary call, from sending until the whole reply is read (Py: 30 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of calls that start, stop or copy a sandbox: create, snapshot, fork, hibernate,
/// wake (Py gives `snapshot()` 180 s; a fork-tree of 16 takes seconds).
pub const SLOW_TIMEOUT: Duration = Duration::from_secs(180);
/// Time allowed to open the TCP connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A PandaStack API client. Cheap to clone (the connection pool is shared); every call is
/// `async` and needs a Tokio runtime.
///
/// ```no_run
/// # async fn demo() -> pandastack_sdk::Result<()> {
/// let client = pandastack_sdk::Client::from_env()?;          // PANDASTACK_API, PANDASTACK_API_KEY
/// let sandbox = client.sandboxes().create(Default::default()).await?;
/// println!("{}", sandbox.exec("echo hi").await?.stdout);     // "hi\n"
/// sandbox.kill().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub http: reqwest::Client,
    pub base: Url,
    pub key: String,
    pub timeout: Duration,
    pub ready_timeout: Duration,
    pub max_create_retry: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Client")
            .field("base", &self.inner.base.as_str())
            .finish_non_exhaustive()
    }
}

/// Settings of a [`Client`]; unset ones come from the environment, then the defaults.
#[derive(Debug, Clone, Default)]
pub struct ClientBuilder {
    api_url: Option<String>,
    api_key: Option<String>,
    timeout: Option<Duration>,
    ready_timeout: Option<Duration>,
    max_create_retry: Option<Duration>,
    user_agent: Option<String>,
}

impl ClientBuilder {
    /// The server's base URL, e.g. `http://127.0.0.1:7700` (only `http://`; this build has no TLS).
    pub fn api_url(mut self, url: impl Into<String>) -> Self {
        self.api_url = Some(url.into());
        self
    }

    /// The API key (`pds_...`), sent as `Authorization: Bearer`.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Deadline of ordinary calls (default [`DEFAULT_TIMEOUT`]). Calls that run a command, a
    /// cell or a stream have their own (see each method).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How long the warm-up retry keeps trying (default: env `PANDASTACK_EXEC_READY_TIMEOUT`
    /// seconds, else 20 s; contract §1.4).
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = Some(timeout);
        self
    }

    /// Budget of the capacity retry of creates and forks (default: env
    /// `PANDASTACK_MAX_CREATE_RETRY_SECONDS`, else 60 s; zero disables it; contract §1.4).
    pub fn max_create_retry(mut self, budget: Duration) -> Self {
        self.max_create_retry = Some(budget);
        self
    }

    /// The `User-Agent` header (default `pandastack-rs/<version>`).
    pub fn user_agent(mut self, agent: impl Into<String>) -> Self {
        self.user_agent = Some(agent.into());
        self
    }

    /// Builds the client.
    ///
    /// # Errors
    /// [`Error::Config`] when no key is set anywhere, the URL does not parse or is not `http://`,
    /// or the HTTP stack cannot start.
    pub fn build(self) -> Result<Client> {
        let url = self
            .api_url
            .or_else(|| env_value(ENV_API))
            .unwrap_or_else(|| DEFAULT_API_URL.to_string());
        let key = self
            .api_key
            .filter(|k| !k.trim().is_empty())
            .or_else(|| env_value(ENV_API_KEY))
            .ok_or_else(|| {
                Error::Config(format!(
                    "no API key: set {ENV_API_KEY} or pass one to the builder"
                ))
            })?;
        let base = parse_base(&url)?;
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .tcp_keepalive(Duration::from_secs(30))
            .user_agent(
                self.user_agent
                    .unwrap_or_else(|| concat!("pandastack-rs/", env!("CARGO_PKG_VERSION")).into()),
            )
            .build()
            .map_err(|e| Error::Config(format!("cannot start the HTTP client: {e}")))?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base,
                key: key.trim().to_string(),
                timeout: self.timeout.unwrap_or(DEFAULT_TIMEOUT),
                ready_timeout: self
                    .ready_timeout
                    .or_else(|| env_seconds(ENV_READY_TIMEOUT))
                    .unwrap_or(Duration::from_secs(20)),
                max_create_retry: self
                    .max_create_retry
                    .or_else(|| env_seconds(ENV_MAX_CREATE_RETRY))
                    .unwrap_or(Duration::from_secs(60)),
            }),
        })
    }
}

impl Client {
    /// A builder; unset settings come from the environment.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client configured from `PANDASTACK_API` and `PANDASTACK_API_KEY` alone.
    ///
    /// # Errors
    /// As [`ClientBuilder::build`].
    pub fn from_env() -> Result<Client> {
        ClientBuilder::default().build()
    }

    /// A client for `api_url` with `api_key`.
    ///
    /// # Errors
    /// As [`ClientBuilder::build`].
    pub fn new(api_url: &str, api_key: &str) -> Result<Client> {
        Client::builder().api_url(api_url).api_key(api_key).build()
    }

    /// The same server and settings with another API key, sharing this client's connection
    /// pool (a server acting for many callers, e.g. the MCP endpoint).
    pub fn with_api_key(&self, key: &str) -> Client {
        let i = &self.inner;
        Client {
            inner: Arc::new(Inner {
                http: i.http.clone(),
                base: i.base.clone(),
                key: key.trim().to_string(),
                timeout: i.timeout,
                ready_timeout: i.ready_timeout,
                max_create_retry: i.max_create_retry,
            }),
        }
    }

    /// The base URL, e.g. `http://127.0.0.1:7700/`.
    pub fn base_url(&self) -> &Url {
        &self.inner.base
    }

    /// `{base}/v1/{segments}?{query}`: each segment percent-encoded, `v1` not repeated when the
    /// base already ends with it, a base path prefix kept (contract §1.1).
    pub fn url(&self, segments: &[&str], query: &[(&str, &str)]) -> Url {
        api_url(&self.inner.base, segments, query)
    }
}

fn env_value(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn env_seconds(name: &str) -> Option<Duration> {
    env_value(name)
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// Parses a base URL.
///
/// # Errors
/// [`Error::Config`] when it is not a URL or not `http://`.
pub fn parse_base(api_url: &str) -> Result<Url> {
    let url = Url::parse(api_url.trim())
        .map_err(|e| Error::Config(format!("invalid API URL '{api_url}': {e}")))?;
    match url.scheme() {
        "http" => Ok(url),
        "https" => Err(Error::Config(format!(
            "{api_url}: https is not supported by this build; use an http:// URL"
        ))),
        other => Err(Error::Config(format!(
            "invalid API URL '{api_url}': scheme {other} is not http"
        ))),
    }
}

/// `{base}/v1/{segments}?{query}` (see [`Client::url`]).
pub fn api_url(base: &Url, segments: &[&str], query: &[(&str, &str)]) -> Url {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    let ends_in_v1 = url
        .path_segments()
        .and_then(|mut s| s.rfind(|p| !p.is_empty()))
        == Some("v1");
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty();
        if !ends_in_v1 {
            path.push("v1");
        }
        path.extend(segments);
    }
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(query);
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(s: &str) -> Url {
        parse_base(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn urls_get_one_v1_prefix() {
        let b = base("http://127.0.0.1:7700");
        assert_eq!(
            api_url(&b, &["sandboxes"], &[]).as_str(),
            "http://127.0.0.1:7700/v1/sandboxes"
        );
        let b = base("http://h:1/v1/");
        assert_eq!(
            api_url(&b, &["sandboxes", "x"], &[]).as_str(),
            "http://h:1/v1/sandboxes/x"
        );
        let b = base("http://h/prefix");
        assert_eq!(api_url(&b, &["me"], &[]).as_str(), "http://h/prefix/v1/me");
    }

    #[test]
    fn segments_and_query_are_encoded() {
        let u = api_url(
            &base("http://h"),
            &["sandboxes", "a/b", "fs"],
            &[("path", "/work space/a&b.csv")],
        );
        assert_eq!(
            u.as_str(),
            "http://h/v1/sandboxes/a%2Fb/fs?path=%2Fwork+space%2Fa%26b.csv"
        );
    }

    #[test]
    fn builder_needs_a_key_and_an_http_url() {
        let no_key = Client::builder().api_url("http://h").api_key("  ").build();
        // The environment may hold a key; only check the message when it does not.
        if std::env::var(ENV_API_KEY)
            .map(|k| k.trim().is_empty())
            .unwrap_or(true)
        {
            assert!(matches!(no_key, Err(Error::Config(m)) if m.starts_with("no API key")));
        }
        assert!(matches!(
            Client::new("https://api.example", "pds_x"),
            Err(Error::Config(_))
        ));
        assert!(matches!(
            Client::new("not a url", "pds_x"),
            Err(Error::Config(_))
        ));
        let c = Client::new("http://h:7/v1", "pds_secret").unwrap();
        assert!(!format!("{c:?}").contains("pds_secret"));
    }
}
