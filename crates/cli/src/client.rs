//! The one HTTP client of the CLI. Every request goes through [`Client::request`], which builds
//! the URL (`{api}/v1/{segments...}`, contract §1.1: a base that already ends in `/v1` is not
//! given a second one; each path segment is percent-encoded), adds `Authorization: Bearer`, and
//! sets the timeout class of the call. [`Client::send`] maps the outcome: no HTTP answer becomes
//! [`CliError::Connect`] naming the URL; a non-2xx becomes [`CliError::Api`] with the body's
//! `error` message (contract §1.5).
//!
//! The client is blocking (reqwest's own runtime thread). Streaming calls (exec stream, follow
//! logs, file transfers) have no overall deadline; every other call has one ([`Timeout`]).

use crate::config::Settings;
use crate::error::{CliError, Result};
use reqwest::blocking::{RequestBuilder, Response};
use reqwest::{Method, StatusCode, Url};
use serde_json::Value;
use std::time::Duration;

/// Deadline of a call, from connecting until the whole reply is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timeout {
    /// Reads and small writes: 60 s.
    Normal,
    /// Calls that start, stop or copy a sandbox (create, snapshot, fork, hibernate, wake...):
    /// 300 s (the Python SDK gives snapshots 180 s; forks of a large sandbox take longer).
    Slow,
    /// Streams and transfers whose length the caller controls: no deadline.
    Stream,
}

impl Timeout {
    fn duration(self) -> Option<Duration> {
        match self {
            Timeout::Normal => Some(Duration::from_secs(60)),
            Timeout::Slow => Some(Duration::from_secs(300)),
            Timeout::Stream => None,
        }
    }
}

/// Time allowed to open a TCP connection to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest server message kept in an error line, characters.
const MAX_MESSAGE_CHARS: usize = 300;

/// A configured connection to one PandaStack server.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::blocking::Client,
    base: Url,
    key: String,
}

impl Client {
    /// A client for `settings`.
    ///
    /// Errors: no API key is configured, or the URL is not an `http://` URL.
    pub fn new(settings: &Settings) -> Result<Client> {
        let key = settings.api_key.clone().ok_or_else(|| {
            CliError::Config(
                "no API key: set PANDASTACK_API_KEY or run `pandastack auth login --key KEY`"
                    .into(),
            )
        })?;
        Client::with_key(&settings.api_url, &key)
    }

    /// A client for `api_url` authenticating with `key`.
    ///
    /// Errors: the URL does not parse, is not `http://`, or the HTTP stack cannot start.
    pub fn with_key(api_url: &str, key: &str) -> Result<Client> {
        let base = parse_base(api_url)?;
        let http = reqwest::blocking::Client::builder()
            .timeout(None)
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_keepalive(Duration::from_secs(30))
            .user_agent(concat!("pandastack-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| CliError::Config(format!("cannot start the HTTP client: {e}")))?;
        Ok(Client {
            http,
            base,
            key: key.to_string(),
        })
    }

    /// The API base URL, e.g. `http://127.0.0.1:7700`.
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// `{base}/v1/{segments}?{query}`.
    pub fn url(&self, segments: &[&str], query: &[(&str, &str)]) -> Url {
        api_url(&self.base, segments, query)
    }

    /// A request with the URL, bearer key and deadline set; add a body, then [`Client::send`].
    pub fn request(
        &self,
        method: Method,
        segments: &[&str],
        query: &[(&str, &str)],
        timeout: Timeout,
    ) -> RequestBuilder {
        let rb = self
            .http
            .request(method, self.url(segments, query))
            .bearer_auth(&self.key);
        match timeout.duration() {
            Some(d) => rb.timeout(d),
            None => rb,
        }
    }

    /// Sends the request; returns the response when the status is 2xx.
    ///
    /// Errors: [`CliError::Connect`] when there is no answer, [`CliError::Api`] for non-2xx.
    pub fn send(&self, rb: RequestBuilder) -> Result<Response> {
        let req = rb
            .build()
            .map_err(|e| CliError::Usage(format!("cannot build request: {e}")))?;
        let url = req.url().clone();
        let resp = self
            .http
            .execute(req)
            .map_err(|e| connect_error(&url, &e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status();
        let body = resp.bytes().map(|b| b.to_vec()).unwrap_or_default();
        Err(api_error(status, &body))
    }

    /// Sends the request and decodes the JSON reply; an empty body (e.g. 204) is `Value::Null`.
    ///
    /// Errors: as [`Client::send`]; [`CliError::BadReply`] when the body is not JSON.
    pub fn json(&self, rb: RequestBuilder) -> Result<Value> {
        let resp = self.send(rb)?;
        let url = resp.url().clone();
        let body = resp.bytes().map_err(|e| connect_error(&url, &e))?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&body).map_err(|e| CliError::BadReply {
            what: url.path().to_string(),
            detail: format!("body is not JSON: {e}"),
        })
    }

    /// `GET` a JSON resource with the normal deadline.
    pub fn get_json(&self, segments: &[&str], query: &[(&str, &str)]) -> Result<Value> {
        self.json(self.request(Method::GET, segments, query, Timeout::Normal))
    }

    /// `POST` a JSON body (or, with `None`, an empty body) and decode the JSON reply.
    pub fn post_json(
        &self,
        segments: &[&str],
        body: Option<&Value>,
        timeout: Timeout,
    ) -> Result<Value> {
        let rb = self.request(Method::POST, segments, &[], timeout);
        let rb = match body {
            Some(b) => rb.json(b),
            None => rb.body(Vec::new()),
        };
        self.json(rb)
    }

    /// `PATCH` a JSON body and decode the JSON reply.
    pub fn patch_json(&self, segments: &[&str], body: &Value) -> Result<Value> {
        self.json(
            self.request(Method::PATCH, segments, &[], Timeout::Normal)
                .json(body),
        )
    }

    /// `DELETE` a resource; returns its JSON reply, usually `Value::Null` (204).
    pub fn delete(&self, segments: &[&str], query: &[(&str, &str)]) -> Result<Value> {
        self.json(self.request(Method::DELETE, segments, query, Timeout::Normal))
    }
}

/// Parses and checks a base URL.
///
/// Errors: not a URL, or not `http://` (this build has no TLS; put the server behind a
/// plain-HTTP address or a local TLS-terminating proxy).
pub fn parse_base(api_url: &str) -> Result<Url> {
    let url = Url::parse(api_url.trim())
        .map_err(|e| CliError::Config(format!("invalid API URL '{api_url}': {e}")))?;
    match url.scheme() {
        "http" => Ok(url),
        "https" => Err(CliError::Config(format!(
            "{api_url}: https is not supported by this build of the CLI; use an http:// URL"
        ))),
        other => Err(CliError::Config(format!(
            "invalid API URL '{api_url}': scheme {other} is not http"
        ))),
    }
}

/// `{base}/v1/{segments}?{query}`; `v1` is not repeated when the base already ends with it, and
/// a base path prefix is kept (contract §1.1).
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

/// The error for a non-2xx reply: the first non-empty string among the JSON body's `error`,
/// `message` and `detail`, else the body text, else the status' reason phrase (contract §1.5).
pub fn api_error(status: StatusCode, body: &[u8]) -> CliError {
    let from_json = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
        ["error", "message", "detail"]
            .iter()
            .find_map(|k| match v.get(k) {
                Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
                Some(Value::Null) | None => None,
                Some(Value::String(_)) => None,
                Some(other) => Some(other.to_string()),
            })
    });
    let text = from_json.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let mut message = one_line(&text);
    if message.is_empty() {
        message = status
            .canonical_reason()
            .unwrap_or("no message")
            .to_lowercase();
    }
    CliError::Api {
        status: status.as_u16(),
        message,
    }
}

/// Collapses all whitespace runs to one space and caps the length.
fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.chars().count() <= MAX_MESSAGE_CHARS {
        return joined;
    }
    let cut: String = joined.chars().take(MAX_MESSAGE_CHARS).collect();
    format!("{cut}...")
}

/// The error for a request that got no HTTP answer: the innermost cause of the chain.
pub fn connect_error(url: &Url, err: &reqwest::Error) -> CliError {
    let cause = if err.is_timeout() {
        "timed out".to_string()
    } else {
        crate::error::root_cause(err)
    };
    CliError::Connect {
        url: url.to_string(),
        cause,
    }
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
        let b = base("http://h");
        let u = api_url(
            &b,
            &["sandboxes", "a/b", "fs"],
            &[("path", "/work space/a&b.csv")],
        );
        assert_eq!(
            u.as_str(),
            "http://h/v1/sandboxes/a%2Fb/fs?path=%2Fwork+space%2Fa%26b.csv"
        );
    }

    #[test]
    fn https_and_garbage_are_config_errors() {
        assert!(matches!(
            parse_base("https://api.example"),
            Err(CliError::Config(_))
        ));
        assert!(matches!(parse_base("not a url"), Err(CliError::Config(_))));
    }

    #[test]
    fn api_error_prefers_error_then_message_then_detail() {
        let e = api_error(StatusCode::NOT_FOUND, br#"{"error":"sandbox x not found"}"#);
        assert_eq!(e.to_string(), "sandbox x not found (HTTP 404)");
        let e = api_error(
            StatusCode::BAD_REQUEST,
            br#"{"error":"","message":"bad ttl"}"#,
        );
        assert_eq!(e.to_string(), "bad ttl (HTTP 400)");
        let e = api_error(StatusCode::UNPROCESSABLE_ENTITY, br#"{"detail":["a","b"]}"#);
        assert_eq!(e.to_string(), r#"["a","b"] (HTTP 422)"#);
    }

    #[test]
    fn api_error_falls_back_to_text_then_reason() {
        let e = api_error(StatusCode::BAD_GATEWAY, b"upstream\n  died\n");
        assert_eq!(e.to_string(), "upstream died (HTTP 502)");
        let e = api_error(StatusCode::SERVICE_UNAVAILABLE, b"");
        assert_eq!(e.to_string(), "service unavailable (HTTP 503)");
        let long = "x".repeat(1000);
        let e = api_error(StatusCode::INTERNAL_SERVER_ERROR, long.as_bytes());
        assert!(e.to_string().len() < 330);
    }

    #[test]
    fn missing_key_is_a_config_error() {
        let s = Settings {
            api_url: "http://h".into(),
            api_url_source: crate::config::Source::Default,
            api_key: None,
            api_key_source: crate::config::Source::Default,
        };
        let e = Client::new(&s)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("no API key"), "{e}");
    }
}
